"""The Dockerfile lints clean, and the image build names what is missing in one line (these
tests need no podman and run in the default suite)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from e2e.images.podman import REPO, build_image


def test_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    done = subprocess.run([str(hadolint), str(REPO / "Dockerfile")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_build_without_podman_says_what_to_run(tmp_path: Path) -> None:
    # Only bash's own directory on PATH: the tools the script needs, no podman.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "sed"):
        (bin_dir / tool).symlink_to(subprocess.check_output(["which", tool], text=True).strip())
    env = {**os.environ, "PATH": str(bin_dir), "MOLDAU_KUBE_CACHE": str(tmp_path / "cache")}
    done = build_image(env=env)
    assert done.returncode == 1
    assert done.stderr.strip() == "images: podman is not installed: run 'make kube-deps'"
