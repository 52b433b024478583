"""Autotuning on the CPU (JT_CPU_AUTOTUNE=1): trials, the chosen config, and persistence across processes."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import warnings

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, logging, sys
    sys.path.insert(0, sys.argv[1])
    import jax, jax.numpy as jnp, numpy as np
    import jt_core as jt
    from jt_core import tuning
    import core_kernels as k
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    x = jnp.asarray(np.random.default_rng(0).standard_normal(100), jnp.float32)
    out = jax.jit(lambda x: jt.triton_call(x, kernel=k.autotuned_scale_kernel, out_shape=x,
                                           grid=lambda m: ((100 + m["BLOCK"] - 1) // m["BLOCK"],), n=100))(x)
    assert np.allclose(np.asarray(out), np.asarray(x) * 3)
    print(json.dumps(dict(tuning.tuning_stats)))
    """
)


def _run(cache_dir: pathlib.Path) -> tuple[dict[str, int], str]:
    env = {**os.environ, "JT_CACHE_DIR": str(cache_dir), "JT_CPU_AUTOTUNE": "1"}
    env.pop("JT_DISABLE_CACHE", None)
    tests_dir = str(pathlib.Path(__file__).parent)
    result = subprocess.run([sys.executable, "-c", SCRIPT, tests_dir], env=env, capture_output=True, text=True,
                            check=True)  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def test_second_process_uses_the_remembered_config_without_trials(tmp_path: pathlib.Path) -> None:
    first, log1 = _run(tmp_path)
    assert first == {"trials": 3, "cached_choices": 0, "tunings": 1}
    assert "won" in log1 and "after tuning 3 configs" in log1
    (record_file,) = list((tmp_path / "autotune").glob("*.json"))
    record = json.loads(record_file.read_text())
    assert 0 <= record["index"] < 3 and len(record["seconds"]) == 3
    second, log2 = _run(tmp_path)
    assert second == {"trials": 0, "cached_choices": 1, "tunings": 0}
    assert f"using remembered config [{record['config']}]" in log2


def test_unreadable_record_is_ignored_and_tuning_runs_again(tmp_path: pathlib.Path) -> None:
    _run(tmp_path)
    (record_file,) = list((tmp_path / "autotune").glob("*.json"))
    record_file.write_text("{not json")
    again, log = _run(tmp_path)
    assert again["trials"] == 3
    assert f"jt cache file '{record_file}' is unusable" in log


@pytest.mark.parametrize("flag", ["", "0"])
def test_without_the_switch_the_first_config_runs_untuned(tmp_path: pathlib.Path, flag: str) -> None:
    env = {**os.environ, "JT_CACHE_DIR": str(tmp_path), "JT_CPU_AUTOTUNE": flag}
    tests_dir = str(pathlib.Path(__file__).parent)
    result = subprocess.run([sys.executable, "-c", SCRIPT, tests_dir], env=env, capture_output=True, text=True,
                            check=True)  # fmt: skip
    assert json.loads(result.stdout.strip().splitlines()[-1])["trials"] == 0


def _handler_record(index: int, seconds: list[float]) -> bytes:
    """A record as jt's GPU launch handler writes it after tuning at run time (C++, no integrity record)."""
    timings = ", ".join(f"{t:.9g}" for t in seconds)
    return f'{{"index": {index}, "seconds": [{timings}], "tuned_by": "jt_cuda_launch"}}'.encode()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (_handler_record(1, [3.2e-05, 1.9e-05, 2.5e-05]), 1),
        (_handler_record(2, [3.2e-05, 1.9e-05, 2.5e-05]), None),  # an index that is not the fastest's
        (_handler_record(1, [3.2e-05, 1.9e-05]), None),  # a timing missing
        (_handler_record(1, [3.2e-05, 1.9e-05, 2.5e-05])[:30], None),  # truncated
    ],
    ids=["consistent", "wrong-index", "short", "truncated"],
)
def test_a_record_the_gpu_handler_wrote_is_used_only_when_it_agrees_with_itself(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, content: bytes, expected: int | None
) -> None:
    from jt_core import tuning

    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "jt"))
    monkeypatch.delenv("JT_DISABLE_CACHE", raising=False)
    key = "f" * 64
    path = tuning.tuning_path(key)
    path.write_bytes(content)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert tuning.load_choice(key, 3) == expected
    if expected is None:
        assert [w for w in caught if "is unusable" in str(w.message)] and not path.exists()
    else:
        assert not caught and path.exists()
