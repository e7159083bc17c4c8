"""The DataLoader (``shmstream.torch.DataLoader``, in ``torch.py``) and its
slot pool (``_loader_pool.py``). Importing this folder never imports torch:
only ``shmstream.loader.torch`` (and its old name ``shmstream.torch``) does."""

from . import _registry  # noqa: F401  (its registry entry; no torch)
