"""What every kind shares: argument checks and their wording (``_checks``),
dtype codes (``_dtypes``), the /dev/shm directory (``_space``), process
liveness (``_proc``) and the old module names that moved (``_moved``)."""
