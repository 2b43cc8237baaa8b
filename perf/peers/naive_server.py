"""The naive FastAPI server: one onnxruntime call per request, no batching.

    .peers/fastapi/venv/bin/python perf/peers/naive_server.py \
        --onnx ENCODER.onnx --tokenizer FRONT/1/tokenizer.json --port N

POST /infer {"text": "..."} -> {"result": [384 floats]}; GET /health. The batcher's model
file and tokenizer (ort_text.OnnxEmbedder), onnxruntime's default threads. The handler is a
plain `def`, as most such servers are written: FastAPI runs it in its thread pool, and
concurrent requests share one session.
"""

from __future__ import annotations

import uvicorn
from fastapi import FastAPI
from ort_text import OnnxEmbedder, arguments
from pydantic import BaseModel


class InferRequest(BaseModel):
    text: str


def create_app(embedder: OnnxEmbedder) -> FastAPI:
    """POST /infer and GET /health around `embedder`."""
    app = FastAPI()

    @app.post("/infer")
    def infer(req: InferRequest) -> dict[str, list[float]]:
        return {"result": embedder.embed([req.text])[0].tolist()}

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def main() -> None:
    args = arguments(__doc__.split("\n\n")[0])
    app = create_app(OnnxEmbedder(args.onnx, args.tokenizer, args.threads))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
