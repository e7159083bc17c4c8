"""The PyTorch DataLoader that carries batches through reused shared-memory
slots (docs/loader.md): ``shmstream.torch.DataLoader``. Importing this
module imports torch (``import shmstream`` alone never does); the
implementation lives in ``shmstream.loader``."""

from .loader.torch import DataLoader, ShmTransportWarning

__all__ = ["DataLoader", "ShmTransportWarning"]
