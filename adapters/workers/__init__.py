"""Dream workers: the pool of threads that executes admitted runs in a process."""
