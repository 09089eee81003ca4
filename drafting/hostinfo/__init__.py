"""What a worker reports about its host: GPUs through NVML, /dev/shm, processes."""
