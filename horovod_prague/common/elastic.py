"""What the framework packages' ``elastic`` modules share: Horovod elastic under Prague.

``hvd.elastic.run`` resets after a worker was lost or the hosts changed, through its module's
``_reset``; an elastic state's ``commit`` broadcasts whether hosts changed, a global
collective. Each framework's ``elastic`` module points Horovod's names at these, as the
drop-in does: the reset is ``Binding.reset``, and the broadcast is the package's guarded
``broadcast_object``, so no rank in it leaves a partner waiting in a group (before: both timed
out).
"""

from __future__ import annotations

import importlib

from .import_hook import patch


def patch_horovod(*modules: str) -> None:
    """Point the names ``import_hook.REPLACED`` lists for Horovod's ``modules`` at ours."""
    for module in modules:
        patch(importlib.import_module(module))
