"""What every kind shares: the argument checks two kinds or more use and
their wording (``_checks``; a kind's own are in its folder),
dtype codes (``_dtypes``), the /dev/shm directory (``_space``) and
process liveness (``_proc``)."""
