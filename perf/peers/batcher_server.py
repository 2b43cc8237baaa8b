"""The seeds' asyncio batcher (article 000, section 4.2), made runnable: FastAPI, an
`asyncio.PriorityQueue` of tasks, and a `BatchScheduler` loop that takes the first task
(waiting at most `timeout`), drains whatever else is queued up to `max_batch`, and runs
the batch in the event loop, which accepts no requests while it computes (as the article's
code does; its prose puts the model in a separate executor).

    .peers/fastapi/venv/bin/python perf/peers/batcher_server.py \
        --onnx ENCODER.onnx --tokenizer FRONT/1/tokenizer.json --port N

POST /infer {"text": "...", "priority": 0} -> {"result": [384 floats]}; GET /health.
Where this deviates from the article, and why:
- The project's ONNX with onnxruntime (ort_text.OnnxEmbedder), not `torch.jit.load`, so
  every server runs the same model file; a batch is padded to its longest text.
- max_batch 16 (the article gives 12, and 16 as the memory bound).
- The queue holds `(priority, sequence, task)`: a PriorityQueue cannot order the article's
  bare Task objects (TypeError as soon as two are queued).
- The loop starts in a lifespan handler (FastAPI deprecated `on_event`).
- A batch that raises fails its requests (HTTP 500) instead of leaving them to the 5 s
  timeout; the article omits error handling. uvicorn[standard], no access logs.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI, HTTPException
from ort_text import OnnxEmbedder, arguments
from pydantic import BaseModel

MAX_BATCH = 16
GET_TIMEOUT_S = 0.3  # the article's `timeout`: how long the loop waits for a first task
REQUEST_TIMEOUT_S = 5.0


class InferRequest(BaseModel):
    text: str
    priority: int = 0


class Task:
    """One request: its text, its priority and the future its answer goes to."""

    def __init__(self, req_id: int, data: str, priority: int) -> None:
        self.req_id, self.data, self.priority = req_id, data, priority
        self.future: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()


class BatchScheduler:
    """Batches queued tasks, up to `max_batch`, and runs each batch as one model call."""

    def __init__(self, embedder: OnnxEmbedder, max_batch: int = MAX_BATCH,
                 timeout: float = GET_TIMEOUT_S) -> None:
        self.queue: asyncio.PriorityQueue[tuple[int, int, Task]] = asyncio.PriorityQueue()
        self.max_batch, self.timeout, self.model = max_batch, timeout, embedder
        self._sequence = itertools.count()

    async def put(self, task: Task) -> None:
        await self.queue.put((task.priority, next(self._sequence), task))

    async def schedule_loop(self) -> None:
        while True:
            batch = []
            try:
                batch.append((await asyncio.wait_for(self.queue.get(), self.timeout))[2])
            except TimeoutError:
                continue
            while len(batch) < self.max_batch:
                try:
                    batch.append(self.queue.get_nowait()[2])
                except asyncio.QueueEmpty:
                    break
            await self.run_batch(batch)

    async def run_batch(self, batch: list[Task]) -> None:
        try:
            outputs = self.model.embed([t.data for t in batch])
        except Exception as err:  # each task of the batch gets the error itself
            for task in batch:
                task.future.set_exception(err)
            return
        for task, out in zip(batch, outputs):
            task.future.set_result(out.tolist())


def create_app(scheduler: BatchScheduler) -> FastAPI:
    """The article's routes around `scheduler`, plus GET /health."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        loop_task = asyncio.create_task(scheduler.schedule_loop())
        yield
        loop_task.cancel()

    app = FastAPI(lifespan=lifespan)

    @app.post("/infer")
    async def infer(req: InferRequest) -> dict[str, list[float]]:
        task = Task(id(req), req.text, -req.priority)
        await scheduler.put(task)
        try:
            result = await asyncio.wait_for(task.future, timeout=REQUEST_TIMEOUT_S)
        except TimeoutError as err:
            raise HTTPException(status_code=504, detail="inference timeout") from err
        return {"result": result}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def main() -> None:
    args = arguments(__doc__.split("\n\n")[0])
    scheduler = BatchScheduler(OnnxEmbedder(args.onnx, args.tokenizer, args.threads))
    uvicorn.run(create_app(scheduler), host=args.host, port=args.port, log_level="warning",
                access_log=False)


if __name__ == "__main__":
    main()
