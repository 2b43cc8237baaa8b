"""The runtime library: running an exported artifact, tokenizing text, decoding images,
batching rows, and the errors a request can meet on the way. Pure code, no Triton: the
Python stubs (python_backends) run it inside the server, and export, server and perf run
it in their own processes. It imports only `core` (docs/architecture.md, layers)."""
