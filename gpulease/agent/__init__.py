"""The node agent: runs on each rented server. Samples GPUs, serves /metrics, runs the
acceptance suite, erases disks and phones home. Imports nothing of the control plane's
database or web stack, and PyTorch only inside the GPU checks."""
