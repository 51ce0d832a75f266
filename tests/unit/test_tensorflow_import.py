"""The TensorFlow side of the drop-in, and the Keras 3 error, each in a fresh interpreter."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[2]


def _python(code, **env):
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("HOROVOD_PRAGUE_") and k != "TF_USE_LEGACY_KERAS"
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_install_replaces_the_tensorflow_and_keras_names():
    result = _python(
        "from horovod_prague.common import import_hook\n"
        "import_hook.install()\n"
        "import horovod.tensorflow.keras as k, horovod.tensorflow as t\n"
        "from horovod_prague.common.import_hook import originals, replacements\n"
        "for m in (t, k):\n"
        "    targets = replacements(m.__name__).items()\n"
        "    print(all(getattr(m, n).__prague_target__ == to for n, to in targets))\n"
        "print(originals(t).allreduce.__module__, originals(k).allreduce.__module__)\n"
        "import horovod_prague.keras as p\n"
        "print(p.DistributedOptimizer.__module__, p.init is t.init.__wrapped__ or 'fwd')\n",
        TF_USE_LEGACY_KERAS="1",
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout.strip().splitlines()
    assert out[:3] == ["True", "True", "horovod.tensorflow horovod.tensorflow.keras"]
    assert out[3].startswith("horovod_prague.keras.optimizer")


def test_keras_3_gets_an_error_naming_the_fix():
    result = _python("import tensorflow\nimport horovod_prague.keras\n")
    assert result.returncode != 0
    assert "ImportError" in result.stderr
    assert "set TF_USE_LEGACY_KERAS=1 before TensorFlow is imported" in result.stderr


def test_a_tape_under_keras_3_patches_what_has_apply_gradients():
    """Without TF_USE_LEGACY_KERAS, ``tf.keras`` is Keras 3, whose legacy ``Optimizer`` is
    a warning class with no ``apply_gradients``: a plain-TensorFlow tape must still work."""
    result = _python(
        "import tensorflow as tf\n"
        "from horovod_prague.tensorflow.optimizer import take_tape_steps_on_apply\n"
        "take_tape_steps_on_apply()\n"
        "take_tape_steps_on_apply()\n"
        "method = tf.compat.v1.train.Optimizer.apply_gradients\n"
        "print(method._prague_takes_tape_step, method.__wrapped__._prague_takes_tape_step\n"
        "      if hasattr(method.__wrapped__, '_prague_takes_tape_step') else 'once')\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "once"]
