"""Hardware-queue evaluation: run PyTorch workloads over 1..N streams and measure the queues."""
