"""prague-bench's convergence workloads: their data, models, schedules and options."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from horovod_prague.bench import datasets
from horovod_prague.bench.cli import job_command
from horovod_prague.bench.plan import parse_args
from horovod_prague.bench.torch_models import build, lr_schedule
from horovod_prague.bench.workload import WORKLOADS


@pytest.fixture(scope="module")
def lm_data() -> dict[str, np.ndarray]:
    """The language model's data, made once for the module (it reads the standard library)."""
    return datasets.stdlib_text()


def test_the_language_models_labels_are_the_next_bytes_and_its_test_text_is_held_out(lm_data):
    data = lm_data
    x, y = data["x"], data["y"]
    assert x.shape == (datasets.LM_TRAIN_WINDOWS, datasets.CONTEXT) == y.shape
    assert data["x_test"].shape == (datasets.LM_TEST_WINDOWS, datasets.CONTEXT)
    assert np.array_equal(x[:, 1:], y[:, :-1])
    assert x.max() < 256 and x.min() >= 0
    train = {row.tobytes() for row in x}
    assert not any(row.tobytes() in train for row in data["x_test"])


def test_a_workloads_data_is_made_once_and_the_same_from_the_cache(tmp_path):
    path = tmp_path / "bn-mlp.npz"
    first = datasets.load("bn-mlp", path)
    assert path.exists()
    again = datasets.load("bn-mlp", path)
    assert all(np.array_equal(first[k], again[k]) for k in first)
    assert np.array_equal(first["x"], datasets.teacher()["x"])


@pytest.mark.parametrize("workload", ["mnist1d", "bn-mlp", "lm"])
def test_every_workloads_model_trains_its_loss_down(workload, request):
    if workload == "lm":
        data = request.getfixturevalue("lm_data")
    elif workload == "bn-mlp":
        data = datasets.teacher()
    else:
        data = {"x": np.random.default_rng(0).standard_normal((64, 40)).astype(np.float32)}
        data["y"] = (data["x"][:, 0] > 0).astype(np.int64)
    torch.manual_seed(0)
    model, opt = build(workload, params=4, lr=WORKLOADS[workload].lr)
    schedule = lr_schedule(workload, opt, 40)
    x, y = torch.from_numpy(data["x"][:32]), torch.from_numpy(data["y"][:32])

    def loss() -> torch.Tensor:
        logits = model(x)
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
        )

    before = loss().item()
    for _ in range(40):
        opt.zero_grad()
        loss().backward()
        opt.step()
        if schedule is not None:
            schedule.step()
    assert loss().item() < 0.8 * before
    assert (schedule is not None) == (workload == "lm")


def test_the_warm_up_rises_to_the_lr_and_the_cosine_ends_at_a_tenth():
    _, opt = build("lm", params=1, lr=1.0)
    schedule = lr_schedule("lm", opt, 50)
    seen = []
    for _ in range(50):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.step()
    assert seen[0] == pytest.approx(0.2) and max(seen) == pytest.approx(1.0)
    assert seen.index(max(seen)) == 4 and seen[-1] == pytest.approx(0.1, abs=0.01)
    assert all(a >= b for a, b in zip(seen[4:], seen[5:], strict=False))


def test_a_workload_sets_its_batch_lr_and_target_and_reaches_every_rank():
    plan, _ = parse_args(["--workload", "lm", "--ranks", "8", "--systems", "allreduce,prague"])
    assert (plan.batch, plan.lr, plan.target) == (16, 3e-3, 0.4)
    job = {"ranks": 8, "scenario": "random", "seed": 0, "system": "prague"}
    command = job_command(job, plan, datasets.cached_path("lm"), datasets.cache_dir() / "o.json")
    assert command[command.index("--workload") + 1] == "lm"
    plan, _ = parse_args(["--workload", "bn-mlp", "--lr", "0.2", "--batch", "8"])
    assert (plan.batch, plan.lr, plan.target) == (8, 0.2, 0.9)


def test_tensorflow_refuses_a_pytorch_workload(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--workload", "lm", "--framework", "tensorflow"])
    assert "--workload lm: PyTorch only" in capsys.readouterr().err


def test_either_all_reduce_is_a_baseline_and_one_is_needed(capsys):
    plan, _ = parse_args(["--systems", "allreduce-poll,prague"])
    assert plan.systems == ["allreduce-poll", "prague"]
    with pytest.raises(SystemExit):
        parse_args(["--systems", "prague,smart"])
    assert "must include allreduce or allreduce-poll" in capsys.readouterr().err
