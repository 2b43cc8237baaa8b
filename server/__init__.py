"""Starting and operating Triton: the launcher, `tmr serve`, the fleet and front door,
rollouts and the watchdog, the tuner and its measurements, traces and monitoring configs.
Imports core/ and the SDK, never python_backends/ (stubs run in Triton's process)."""
