"""One vocabulary of options (sgsi/options.py): the same names in Python, SQL and on the command
line, deprecated aliases that still work, and errors that spell options as the caller's interface."""

import pickle
import warnings

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sgsi
from sgsi.cli import main
from sgsi.errors import InputError, SgsiError
from sgsi.join.backends import gpu_available
from sgsi.options import respell, spell

PATH = "(a)-[:K]->(b)-[:K]->(c)"       # on the 2-cycle below: 0 isomorphisms, 2 homomorphisms


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("options")
    pq.write_table(pa.table({"src": [1, 2, 3], "dst": [2, 1, 4], "label": ["K", "K", "K"]}), d / "e.parquet")
    out = d / "g.sgsi"
    sgsi.build(out, edges=str(d / "e.parquet")).close()
    return {"dir": d, "store": str(out), "edges": str(d / "e.parquet")}


def test_spell_and_respell():
    assert [spell("force", True, i) for i in ("python", "sql", "cli")] == ["force=True", "force := true", "--force"]
    assert [spell("device", "cpu", i) for i in ("python", "sql", "cli")] == ['device="cpu"', "device := 'cpu'",
                                                                            "--device cpu"]
    assert [spell("max_rows", None, i) for i in ("python", "sql", "cli")] == ["max_rows", "max_rows", "--max-rows"]
    msg = "x (use --force to replace it); or use --device cpu; or a smaller --memory-budget; `sgsi info --verify g`"
    assert respell(msg, "cli") == msg
    assert respell(msg, "python") == ('x (use force=True to replace it); or use device="cpu"; or a smaller '
                                      'memory_budget; `sgsi info --verify g`')
    assert respell(msg, "sql") == ("x (use force := true to replace it); or use device := 'cpu'; or a smaller "
                                   "memory_budget; `sgsi info --verify g`")
    # pattern text is not an option
    for text in ("bad edge in (a)-->(b)--(c) at --x", "bad vertex in '(a)--force'", "x --forced"):
        assert respell(text, "sql") == text


def test_homomorphism_and_max_rows_in_python(store):
    with sgsi.open(store["store"]) as g:
        assert g.count(PATH, device="cpu") == 0
        assert g.count(PATH, device="cpu", homomorphism=True) == 2
        assert g.match(PATH, device="cpu", homomorphism=True).read_all().num_rows == 2
        assert g.match(PATH, device="cpu", homomorphism=True, max_rows=1).read_all().num_rows == 1
        with pytest.raises(SgsiError, match="max_rows must be a non-negative integer, got -1"):
            g.match(PATH, max_rows=-1)
        with pytest.raises(SgsiError, match="homomorphism must be True or False, got 'yes'"):
            g.count(PATH, homomorphism="yes")
        with pytest.raises(TypeError, match="unexpected keyword argument 'homomorphsm'"):
            g.count(PATH, homomorphsm=True)
        with pytest.raises(TypeError, match="unexpected keyword argument 'limit'"):
            g.count(PATH, limit=3)
        with pytest.raises(TypeError):      # the old fourth positional (injective) is keyword-only now
            g.count(PATH, "cpu", None, False)


def test_deprecated_python_names_still_work(store):
    with sgsi.open(store["store"]) as g:
        with pytest.warns(DeprecationWarning, match=r"injective=\.\.\.\) is deprecated: use homomorphism=True"):
            assert g.count(PATH, device="cpu", injective=False) == 2
        with pytest.warns(DeprecationWarning, match="use max_rows"):
            assert g.match(PATH, device="cpu", homomorphism=True, limit=1).read_all().num_rows == 1
        with pytest.warns(DeprecationWarning):
            assert g.match(PATH, device="cpu", injective=True).read_all().num_rows == 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            with pytest.raises(SgsiError, match="give max_rows only"):
                g.match(PATH, max_rows=1, limit=1)
            with pytest.raises(SgsiError, match="contradict"):
                g.count(PATH, homomorphism=True, injective=True)


def test_errors_spell_options_as_the_interface_does(store, tmp_path, capsys):
    """One error (the store exists) raised by the same code from three front ends."""
    with pytest.raises(InputError) as info:
        sgsi.build(store["store"], edges=store["edges"])
    assert "(use force=True to replace it)" in str(info.value)
    con = duckdb.connect()
    sgsi.register(con, device="cpu")
    with pytest.raises(duckdb.Error) as info:
        con.execute(f"SELECT sgsi_build('{store['store']}', edges := '{store['edges']}')").fetchall()
    assert "(use force := true to replace it)" in str(info.value)
    con.close()
    assert main(["build", "--edges", store["edges"], "--out", store["store"], "-q"]) == 1
    assert "(use --force to replace it)" in capsys.readouterr().err
    # the message kept in the exception is the command line's; pickling keeps the interface
    e = InputError("use --force")
    e.interface = "sql"
    assert str(pickle.loads(pickle.dumps(e))) == "use force := true"


@pytest.mark.skipif(gpu_available(), reason="needs a machine without a GPU")
def test_no_gpu_error_names_the_cpu_option_of_each_interface(store, capsys):
    with sgsi.open(store["store"]) as g, pytest.raises(SgsiError) as info:
        g.count(PATH, device="gpu")
    assert 'or use device="cpu")' in str(info.value)
    con = duckdb.connect()
    sgsi.register(con)
    with pytest.raises(duckdb.Error, match=r"or use device := 'cpu'\)"):
        con.execute(f"SELECT match_count('{store['store']}', '{PATH}', device := 'gpu')").fetchall()
    con.close()
    assert main(["count", store["store"], PATH, "--device", "gpu"]) == 1
    assert "or use --device cpu)" in capsys.readouterr().err
