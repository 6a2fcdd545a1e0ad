"""DataLoaders over the demo profiles in every format: decoded images, collated batches."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch", reason="torch is the optional [torch] extra")

import hpcio  # noqa: E402
import hpcio.torch as ht  # noqa: E402
from hpcio.demo import TOUR_FORMATS, tour  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:The image decoding and encoding capabilities of TorchVision"),
    pytest.mark.filterwarnings("ignore:compression=.sample"),  # the demo's MDS shards
]
N = 16


@pytest.fixture(scope="module")
def demo_shards(tmp_path_factory):
    """``demo_shards(profile)`` -> directory holding the demo tour's shards, one per format."""
    made = {}

    def make(profile: str) -> str:
        if profile not in made:
            out = tmp_path_factory.mktemp(profile)
            report = tour(out, profile, n=N, log=lambda *args: None, tune=False)
            assert report.ok, report.formats
            made[profile] = str(out)
        return made[profile]

    return make


def images_of(batch) -> list:
    """Every image value of a vlm batch: one ``image`` or a list of ``images`` per sample."""
    if "images" in batch:
        return [img for imgs in batch["images"] for img in imgs]
    return list(batch["image"])


def check_vlm_batch(batch, size: int) -> None:
    assert len(batch["id"]) == size and all(isinstance(i, str) for i in batch["id"])
    assert all(isinstance(m, list) and m[0]["role"] == "user" for m in batch["messages"])
    images = images_of(batch)
    assert len(images) >= size
    for image in images:
        assert isinstance(image, torch.Tensor) and image.dtype == torch.uint8
        assert image.ndim == 3 and image.shape[0] == 3 and min(image.shape[1:]) >= 300


@pytest.mark.parametrize("adapter", ["iterable", "map"])
@pytest.mark.parametrize("fmt", TOUR_FORMATS)
def test_vlm_batches_hold_decoded_tensors_in_every_format(demo_shards, fmt, adapter):
    ds = hpcio.open(os.path.join(demo_shards("vlm"), fmt))
    cls = ht.IterableDataset if adapter == "iterable" else ht.MapDataset
    loader = ht.DataLoader(cls(ds, batch_size=8, decode="torchrgb8", seed=1), num_workers=2, timeout=300)
    batches = list(loader)
    assert len(batches) == N // 8
    for batch in batches:
        check_vlm_batch(batch, 8)


@pytest.mark.parametrize("fmt", TOUR_FORMATS)
def test_text_batches_collate_by_default_in_every_format(demo_shards, fmt):
    ds = hpcio.open(os.path.join(demo_shards("text"), fmt))
    batch = next(iter(ht.DataLoader(ht.IterableDataset(ds, batch_size=8, shuffle=False))))
    assert batch["id"].tolist() == list(range(8))
    assert batch["text"] == [ds[i]["text"] for i in range(8)]
    assert batch["meta"]["score"].dtype == torch.float64 and len(batch["meta"]["tags"]) == 8


def decode_where(data) -> int:
    """A decode callable that says which process ran it."""
    return os.getpid()


def test_images_are_decoded_in_the_workers(demo_shards):
    ds = hpcio.open(os.path.join(demo_shards("vlm"), "mds"))
    loader = ht.DataLoader(ht.IterableDataset(ds, batch_size=4, decode=decode_where), num_workers=2, timeout=300)
    pids = {int(pid) for batch in loader for pid in images_of(batch)}
    assert len(pids) == 2 and os.getpid() not in pids


def test_a_plain_torch_dataloader_takes_ragged_collate(demo_shards):
    ds = hpcio.open(os.path.join(demo_shards("vlm"), "jinx"))
    data = ht.MapDataset(ds, decode="torchrgb8")
    loader = torch.utils.data.DataLoader(data, batch_size=8, num_workers=2, collate_fn=ht.ragged_collate,
                                         timeout=300)
    for batch in loader:
        check_vlm_batch(batch, 8)
    with pytest.raises(RuntimeError, match="equal size"):  # what default_collate says
        next(iter(torch.utils.data.DataLoader(data, batch_size=8)))


def test_a_pipeline_decodes_samples_and_batches(demo_shards):
    from hpcio.pipeline import Pipeline

    ds = hpcio.open(os.path.join(demo_shards("vlm"), "webdataset"))
    samples = list(Pipeline(ds, seed=2).decode("torchrgb8"))
    assert len(samples) == N and all(images_of(ht.ragged_collate([s])) for s in samples)
    batches = list(ht.PipelineDataset(Pipeline(ds, seed=2).batch(8), decode="rgb8"))
    assert [len(b) for b in batches] == [8, 8]
    assert all(image.shape[2] == 3 for b in batches for image in images_of(ht.ragged_collate(b)))


def jpeg(width: int, height: int) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (width, height, 0)).save(buf, "JPEG")
    return buf.getvalue()


def test_samples_with_several_images_collate_as_lists_of_tensors(tmp_path):
    # 1-4 images per sample, each of its own size; stored with pickle until the formats
    # store lists of binaries natively.
    with hpcio.open_writer(tmp_path / "multi", format="mds", columns={"id": "int", "images": "pkl"},
                           allow_pickle=True) as w:
        for i in range(8):
            w.write({"id": i, "images": [jpeg(16 + 8 * j, 24 + 8 * i) for j in range(1 + i % 4)]})
    ds = hpcio.open(tmp_path / "multi", allow_pickle=True)
    data = ht.MapDataset(ds, batch_size=4, shuffle=False, decode="torchrgb8")
    batches = list(ht.DataLoader(data, num_workers=2, timeout=300))
    assert [b["id"].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    for batch in batches:
        for i, images in zip(batch["id"].tolist(), batch["images"]):
            assert [tuple(t.shape) for t in images] == [(3, 24 + 8 * i, 16 + 8 * j) for j in range(1 + i % 4)]
            assert all(t.dtype == torch.uint8 for t in images)


def test_the_loader_hands_over_what_the_dataset_collated(tmp_path):
    """hpcio's DataLoader passes an IterableDataset's batches on as they are: with
    ``collate_fn=list`` the samples themselves, numpy arrays left as arrays (PyTorch's
    default would walk every batch again, turning them into tensors and copying dicts)."""
    import numpy as np

    with hpcio.open_writer(tmp_path / "d", format="mds", columns={"id": "int", "v": "ndarray:float32"}) as w:
        for i in range(6):
            w.write({"id": i, "v": np.full(3, i, np.float32)})
    data = ht.IterableDataset(hpcio.open(tmp_path / "d"), batch_size=3, shuffle=False, collate_fn=list)
    batches = list(ht.DataLoader(data))
    assert [[s["id"] for s in b] for b in batches] == [[0, 1, 2], [3, 4, 5]]
    assert all(type(s["v"]) is np.ndarray for b in batches for s in b)
    assert isinstance(next(iter(torch.utils.data.DataLoader(data, batch_size=None)))[0]["v"], torch.Tensor)
