"""Request size limits, per protocol (no dependencies: the server side reads them too)."""

from __future__ import annotations

# Request size limits, per protocol. Triton 2.51's HTTP server dies (signal 11) on a body of
# about 4 MiB or more, whatever the model: measured here, 4,180,002 bytes were served and
# 4,194,202 killed the process (triton-inference-server/server#5840). gRPC took 9.6 MB
# and more without harm. The front door refuses bodies over these limits (413 /
# RESOURCE_EXHAUSTED), and the SDK never builds a request over them: it cuts a call into
# requests by bytes as well as by rows. gRPC's limit holds one image at the largest
# max_image_bytes of the shipped models (16 MiB) and the envelope.
HTTP_MAX_BODY_BYTES = 4_000_000
GRPC_MAX_MESSAGE_BYTES = 17 * 2**20
MAX_REQUEST_BYTES: dict[str, int] = {"http": HTTP_MAX_BODY_BYTES, "grpc": GRPC_MAX_MESSAGE_BYTES}
