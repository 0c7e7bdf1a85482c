"""User spans and marks reach the reader with their labels; filters keep excluded modules
out of the stream."""

from helpers import qualname_of, rooted_edges, run_traced


def _only(run):
    proc = run.by_role("main")
    assert "drain_err" not in proc, proc["drain_err"]
    assert run.returncode == 0, run.stderr[-3000:]
    return proc


def test_spans_and_marks_appear_with_their_labels(tmp_path):
    proc = _only(run_traced("spans", tmp_path))
    out = proc["trace"]
    labels = set(out["labels"])
    assert {"load batch", "decorated step", "bare", "epoch 0", "epoch 1", "epoch 2"} <= labels
    # a label is interned once per name
    assert len(out["labels"]) == len(labels)
    kinds = out["kinds"]
    assert kinds.get("9") == kinds.get("10") == 9      # 3 x (load batch, decorated step, bare)
    assert kinds.get("11") == 3                          # marks
    assert sorted(label for _, label in out["tree"]["marks"]) == ["epoch 0", "epoch 1", "epoch 2"]
    edges = rooted_edges(out["tree"], ["entry"])
    spans = {tuple(k for k in path if k.startswith("span:")): calls
             for path, calls in edges.items() if path[-1].startswith("span:")}
    assert spans[("span:load batch",)] == 3
    assert spans[("span:load batch", "span:decorated step")] == 3
    assert spans[("span:bare",)] == 3
    # the decorated function runs inside its span
    inside = [path for path in edges if qualname_of(path[-1]) == "step"]
    assert inside and all("span:decorated step" in path for path in inside)


def test_excluded_module_is_not_traced(tmp_path):
    proc = _only(run_traced("filtered", tmp_path, start={"exclude": ["filtered_helper"]}))
    edges = rooted_edges(proc["trace"]["tree"], ["entry"])
    names = {qualname_of(k) for path in edges for k in path}
    assert "mine" in names
    assert not any("filtered_helper" in k for path in edges for k in path), sorted(names)
    assert not {"helper", "inner"} & names
    mine = [calls for path, calls in edges.items() if qualname_of(path[-1]) == "mine"]
    assert sum(mine) == 30


def test_without_filter_the_helper_is_traced(tmp_path):
    proc = _only(run_traced("filtered", tmp_path))
    edges = rooted_edges(proc["trace"]["tree"], ["entry"])
    names = {qualname_of(k) for path in edges for k in path}
    assert {"mine", "helper", "inner"} <= names
