"""The DataLoader (``shmstream.torch.DataLoader``, in ``torch.py``) and its
slot pool (``_loader_pool.py``). Importing this folder never imports torch:
only ``shmstream.loader.torch`` (and ``shmstream.torch``, its public path,
which re-exports it) does."""

from . import _registry  # noqa: F401  (its registry entry; no torch)
