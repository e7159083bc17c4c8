"""Names of src/shmstream that vulture (tests/repo/test_lint.py) would report
as unused, but that are used where it cannot see: Python, a library or the
kernel calls them by name, or they keep an object alive. vulture counts a
name as used wherever it appears, so one attribute of a stand-in per name
is enough; each says who uses it. Never imported: vulture only reads it."""

from types import SimpleNamespace

_ = SimpleNamespace()

USED_WHERE_VULTURE_CANNOT_SEE = (
    _.protocol,  # SharedArray.__reduce_ex__(protocol): pickle's signature
    _.memo,  # SharedArray.__deepcopy__(memo): copy.deepcopy's signature
    _.max_version,  # CudaArray.__dlpack__(max_version=...): the DLPack protocol's keywords
    _.dl_device,  # and dl_device=
    _.__cuda_array_interface__,  # read by CuPy, Numba and torch.as_tensor
    _._keep,  # CudaArray._keep: holds the buffer's owner alive as long as the view
    _.persistent_id,  # pickle.Pickler calls it (the loader's worker side)
    _.persistent_load,  # pickle.Unpickler calls it (the loader's main side)
    _.reducer_override,  # pickle.Pickler calls it (the loader's worker side, torch < 2.6)
    _.__signature__,  # inspect.signature reads it (stream(): help() and IDEs)
    _.should_exit,  # uvicorn.Server's stop flag, set by the viewer
    _._close_all,  # registered with atexit (the bridge's sessions)
    _._close_started,  # registered by the bridge's at_exit (started bridges)
    _.imagetype,  # milk.Layout's field: milk's image type, for readers of the layout
)
