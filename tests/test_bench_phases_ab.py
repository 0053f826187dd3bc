"""bench/phases.py and bench/ab.py run end to end on the CPU: the phase table of each query (the planner
and the engine left unwrapped afterwards), and two trees interleaved with their counts compared."""

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))
import phases  # noqa: E402


def test_phases_times_each_phase_and_restores_them(tmp_path, capsys):
    import sgsi.graph as graph_mod
    from sgsi.join import engine as engine_mod
    from sgsi.join import plan as plan_mod
    before = (graph_mod.make_plan, plan_mod.make_plan, plan_mod._candidates, engine_mod.Engine._extension,
              engine_mod.refine_cost)
    phases.main(["--edges", "3e4", "--sizes", "4", "--queries", "2", "--runs", "1", "--device", "cpu",
                 "--data", str(tmp_path / "data")])
    assert (graph_mod.make_plan, plan_mod.make_plan, plan_mod._candidates, engine_mod.Engine._extension,
            engine_mod.refine_cost) == before
    out = capsys.readouterr().out
    assert out.count("## query") == 2
    assert "plan.make_plan" in out and "plan._filtered_sets" in out
    assert "Engine._gather" in out or "Engine._row_sets" in out           # a step's sets, either way


def test_ab_interleaves_both_trees_and_compares_counts(tmp_path):
    """Two pairs of processes (started in either order), their times pooled per query."""
    tree = str(Path(__file__).resolve().parents[1])
    got = subprocess.run([sys.executable, str(BENCH / "ab.py"), "--trees", tree, tree, "--edges", "3e4",
                          "--sizes", "4", "--queries", "2", "--device", "cpu", "--warm", "1", "--reps", "3",
                          "--pairs", "2", "--data", str(tmp_path / "data")],
                         capture_output=True, text=True, check=True)
    rows = [line for line in got.stdout.splitlines() if line.startswith("| 0:") or line.startswith("| 1:")]
    assert len(rows) == 2
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 6                   # query, matches, A, B, ratio of the minima, paired ratio
        assert int(cells[1].replace(",", "")) > 0
        assert float(cells[4]) > 0 and float(cells[5]) > 0
