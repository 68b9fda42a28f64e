"""Pure analysis passes over tables: no I/O, no mutation of their inputs."""
