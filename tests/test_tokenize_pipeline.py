"""Tokenising in a pipeline: a BPE trained at test time on the demo text, the documents
tokenised in ``map`` before the cache boundary and packed into rows after it.

The pattern of docs/pretraining.md: every token of every document arrives exactly once,
rows say where their documents start (``cu_seqlens``, ``position_ids``), the tokenizer
runs once per document over all runs, and a loader's ``state_dict`` resumes the packed
steps exactly.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

import hpcio
from hpcio import demo
from hpcio.errors import StepPlanError, UnstableIdentityError
from hpcio.pipeline import Pipeline

torch = pytest.importorskip("torch")
tokenizers = pytest.importorskip("tokenizers")
import hpcio.torch as ht  # noqa: E402

DOCUMENTS = 120
EOS = 0  # the tokenizer's first special token
PAD = -1  # not a token id: padding is told apart from documents
MAX_LEN = 2048


def train_bpe(texts, path, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer)
    tokenizer.save(str(path))
    return tokenizer


class Tokenize:
    """The map stage: token ids of the text, named by a digest of the tokenizer."""

    calls = 0  # documents tokenised in this process, to see the cache spare the tokenizer

    def __init__(self, path):
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(path))

    def fingerprint(self):
        return hashlib.sha256(self.tokenizer.to_str().encode()).hexdigest()[:16]

    def __call__(self, sample):
        Tokenize.calls += 1
        return {"tokens": np.asarray(self.tokenizer.encode(sample["text"]).ids, dtype=np.int32)}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The demo text as MDS, a BPE trained on it, and each document's token ids."""
    root = tmp_path_factory.mktemp("corpus")
    docs = list(demo.generate("text", DOCUMENTS, seed=11))
    with hpcio.open_writer(root / "text", format="mds", columns={"id": "int", "text": "str", "meta": "json"}) as w:
        for d in docs:
            w.write(d)
    tokenizer = train_bpe([d["text"] for d in docs], root / "bpe.json", vocab_size=1000)
    expected = [tokenizer.encode(d["text"]).ids for d in docs]
    assert tokenizer.token_to_id("<|endoftext|>") == EOS
    assert all(EOS not in ids for ids in expected) and max(len(ids) for ids in expected) < MAX_LEN
    # the BPE is a real one: it merges bytes, and decodes back to the text
    assert sum(map(len, expected)) < sum(len(d["text"].encode()) for d in docs) / 2
    assert tokenizer.decode(expected[0]) == docs[0]["text"]
    return {"path": root / "text", "tokenizer": root / "bpe.json", "expected": expected, "root": root}


def packed(corpus, cache, *, max_len=MAX_LEN, rows=2, **options):
    options = {"seed": 3, "plan_window": 64, "provenance": True, "context": {"rank": 0, "world_size": 1}, **options}
    return (Pipeline(hpcio.open(corpus["path"]), **options)
            .map(Tokenize(corpus["tokenizer"]))
            .cache(cache)
            .pack(max_len, eos=EOS, pad=PAD)
            .batch(rows))


def check_row(row, expected) -> list[int]:
    """The source indices of the documents of ``row``, each checked token for token."""
    tokens, cu = row["tokens"], row["cu_seqlens"].tolist()
    length = int(row["length"])
    assert tokens.shape == (MAX_LEN,) and row["cu_seqlens"].dtype == np.int32
    assert cu[0] == 0 and cu[-1] == length and all(a < b for a, b in zip(cu, cu[1:]))
    docs = list(row["__index__"])
    assert len(docs) == len(cu) - 1
    for k, (a, b) in enumerate(zip(cu, cu[1:])):
        assert tokens[a:b].tolist() == [*expected[docs[k]], EOS]  # the whole document, its EOS last
        assert row["position_ids"][a:b].tolist() == list(range(b - a))
        assert row["doc_ids"][a:b].tolist() == [k] * (b - a)
    assert tokens[length:].tolist() == [PAD] * (MAX_LEN - length)
    assert row["doc_ids"][length:].tolist() == [-1] * (MAX_LEN - length)
    assert row["position_ids"][length:].tolist() == list(range(MAX_LEN - length))
    return docs


def test_every_token_of_every_document_arrives_once(corpus, tmp_path):
    before = Tokenize.calls
    pipe = packed(corpus, tmp_path / "cache")
    assert pipe.step_policy == "planned"
    steps = list(pipe)
    assert Tokenize.calls - before == DOCUMENTS  # each document tokenised once, when caching
    assert len(steps) == pipe.steps() and all(len(step) == 2 for step in steps[:-1])
    seen = [i for step in steps for row in step for i in check_row(row, corpus["expected"])]
    assert sorted(seen) == list(range(DOCUMENTS))
    delivered = sum(int(row["length"]) for step in steps for row in step)
    assert delivered == sum(len(ids) + 1 for ids in corpus["expected"])

    # a later run (a new tokenizer object, the same tokenizer) reads the cache
    again = list(packed(corpus, tmp_path / "cache"))
    assert Tokenize.calls - before == DOCUMENTS
    assert len(again) == len(steps)
    for a, b in zip(again, steps):
        assert [r["tokens"].tolist() for r in a] == [r["tokens"].tolist() for r in b]
    assert len(os.listdir(tmp_path / "cache")) == 1


def test_the_cache_holds_the_token_arrays_in_document_order(corpus, tmp_path):
    pipe = packed(corpus, tmp_path / "cache")
    pipe.steps()  # materialises the cache
    (key,) = os.listdir(tmp_path / "cache")
    (part,) = [p for p in os.listdir(tmp_path / "cache" / key) if p.startswith("part-") and not p.endswith(".done")]
    with hpcio.open(tmp_path / "cache" / key / part) as cached:
        got = [s["tokens"] for s in cached]
    assert [t.dtype for t in got] == [np.dtype(np.int32)] * DOCUMENTS
    assert [t.tolist() for t in got] == corpus["expected"]


def test_a_retrained_tokenizer_writes_a_new_cache(corpus, tmp_path):
    list(packed(corpus, tmp_path / "cache"))
    texts = [s["text"] for s in hpcio.open(corpus["path"])]
    other = dict(corpus, tokenizer=corpus["root"] / "bpe-600.json")
    smaller = train_bpe(texts, other["tokenizer"], vocab_size=600)
    other["expected"] = [smaller.encode(t).ids for t in texts]
    assert other["expected"] != corpus["expected"]
    steps = list(packed(other, tmp_path / "cache"))
    assert len(os.listdir(tmp_path / "cache")) == 2
    seen = [i for step in steps for row in step for i in check_row(row, other["expected"])]
    assert sorted(seen) == list(range(DOCUMENTS))


def tokens_of(step) -> list[list[int]]:
    return [row["tokens"].tolist() for row in step]


def test_a_loader_resumes_the_packed_steps_from_its_state_dict(corpus, tmp_path):
    pipe = packed(corpus, tmp_path / "cache")
    full = [tokens_of(step) for step in ht.DataLoader(ht.PipelineDataset(pipe))]
    assert len(full) == pipe.steps() >= 8

    loader = ht.DataLoader(ht.PipelineDataset(pipe))
    head = []
    for step in loader:
        head.append(tokens_of(step))
        if len(head) == 3:
            state = loader.state_dict()
            break
    assert state["policy"] == "planned" and state["position"] == 3 and state["epoch"] == 0

    # a new job, the same pipeline: the steps after the third, and nothing else
    resumed = ht.DataLoader(ht.PipelineDataset(packed(corpus, tmp_path / "cache")))
    resumed.load_state_dict(state)
    assert head + [tokens_of(step) for step in resumed] == full

    # resumed over two workers: they take the groups left in turns, whole rounds only
    two = ht.DataLoader(ht.PipelineDataset(packed(corpus, tmp_path / "cache")), num_workers=2)
    two.load_state_dict(state)
    rest = [tokens_of(step) for step in two]
    assert rest == full[3 : 3 + (len(full) - 3) // 2 * 2]


def test_a_document_longer_than_a_row_is_refused_when_planning(corpus, tmp_path):
    # unshuffled and one window: the first document over 256 tokens (with its EOS) is named
    pipe = packed(corpus, tmp_path / "cache", max_len=256, shuffle=False, plan_window=DOCUMENTS)
    first = next(len(ids) + 1 for ids in corpus["expected"] if len(ids) + 1 > 256)
    with pytest.raises(StepPlanError) as exc:
        next(iter(pipe))
    assert str(exc.value) == (f"a document of {first} tokens does not fit a row of 256; "
                              "pack(split_documents=True) cuts long documents into rows")


def test_a_tokenizer_closed_over_in_a_function_is_refused_at_the_cache(corpus, tmp_path):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(corpus["tokenizer"]))

    def tokenize(sample):
        return {"tokens": np.asarray(tokenizer.encode(sample["text"]).ids, dtype=np.int32)}

    with pytest.raises(UnstableIdentityError) as exc:
        Pipeline(hpcio.open(corpus["path"])).map(tokenize).cache(tmp_path / "cache")
    assert str(exc.value) == (
        f"{__name__}.test_a_tokenizer_closed_over_in_a_function_is_refused_at_the_cache.<locals>.tokenize "
        "is defined inside a function, so its identity is not stable across runs; define it at module level")
