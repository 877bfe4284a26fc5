"""String ops on the MLX EP against ORT's CPU EP: ``Equal`` on strings, ``StringConcat``,
``StringSplit``, ``RegexFullMatch``, ``StringNormalizer`` and ``LabelEncoder`` with strings.

MLX has no strings: these nodes run as host kernels inside the EP's fused node (the strings
never become MLX arrays), and their bool / int64 results are ordinary tensors that MLX nodes
of the same fused node consume. Every case asserts the node ran on MLX and compares with ORT's
CPU EP. ORT's CPU StringNormalizer needs the ``en_US.UTF-8`` locale for case changes and
case-insensitive stopwords; where this machine lacks it (ORT's session then fails), those
cases compare with a Python reference of ORT's semantics on inputs whose case mapping is
unambiguous (the kernel's per-character mapping is unit-tested in
``crates/plan/tests/strings.rs``).

Hostile inputs: malformed UTF-8 (bytewise ops match ORT; StringNormalizer fails cleanly as
ORT does), a huge ``maxsplit``, and patterns RE2 or the ``regex`` crate refuse (the node stays
on ORT's CPU EP, which then fails or runs it as it does without the EP).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import assert_all_on_mlx, assert_on_cpu, assert_on_mlx, assert_outputs_match, make_session, run

S, B, I64, F32 = TensorProto.STRING, TensorProto.BOOL, TensorProto.INT64, TensorProto.FLOAT
ML = "ai.onnx.ml"


def strs(*values, shape=None) -> np.ndarray:
    a = np.array(list(values), dtype=object)
    return a.reshape(shape) if shape is not None else a


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[tuple[str, int, Sequence]],
    outputs: Sequence[tuple[str, int]],
    *,
    opset: int = 20,
    ml_opset: int | None = None,
    initializers: Sequence[onnx.TensorProto] = (),
) -> onnx.ModelProto:
    graph = helper.make_graph(
        list(nodes),
        "strings",
        [helper.make_tensor_value_info(n, t, list(d)) for n, t, d in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        initializer=list(initializers),
    )
    opsets = [helper.make_opsetid("", opset)]
    if ml_opset is not None:
        opsets.append(helper.make_opsetid(ML, ml_opset))
    m = helper.make_model(graph, opset_imports=opsets)
    m.ir_version = 9  # opset 20 needs IR 9; ORT 1.23 reads up to 11
    return m


def one(op: str, feeds: Mapping[str, np.ndarray], out_types: Sequence[int], *, opset: int = 20, domain: str = "", ml_opset=None, **attrs):
    outs = ["y"] if len(out_types) == 1 else [f"y{i}" for i in range(len(out_types))]
    node = helper.make_node(op, list(feeds), outs, name=f"{op.lower()}_0", domain=domain, **attrs)
    ins = [(n, S if v.dtype == object else helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()]
    return model([node], ins, list(zip(outs, out_types)), opset=opset, ml_opset=ml_opset)


def check(m: onnx.ModelProto, feeds: Mapping[str, np.ndarray], op_types: Sequence[str] | None = None, expected=None):
    """Runs on the MLX EP; compares with ORT's CPU EP (or ``expected``); asserts placement."""
    if expected is None:
        expected = run(make_session(m, mlx=False), feeds)
    session = make_session(m, mlx=True)
    actual = run(session, feeds)
    assert_outputs_match(actual, expected, rtol=0, atol=0)
    assert_on_mlx(session, op_types or sorted({n.op_type for n in m.graph.node}))
    return actual


# ---------------------------------------------------------------------------------------------
# Equal and StringConcat


EQUAL_FEEDS = {
    "same": (strs("a", "b", "", "é"), strs("a", "c", "", "é")),
    "broadcast": (strs("a", "b", "c", "a", "b", "c", shape=(2, 3)), strs("a", "x", "c")),
    "column": (strs("a", "b", shape=(2, 1)), strs("a", "b", "c")),
    "scalar": (strs("x", shape=()), strs("x", "y")),
    "empty": (strs(shape=(0,)), strs("a")),
    "utf8": (strs("ß", "日本", "a\u0301"), strs("ß", "日本", "á")),
}


@pytest.mark.parametrize("opset", [19, 20])
@pytest.mark.parametrize("case", sorted(EQUAL_FEEDS))
def test_equal_strings(case, opset):
    a, b = EQUAL_FEEDS[case]
    check(one("Equal", {"a": a, "b": b}, [B], opset=opset), {"a": a, "b": b})


CONCAT_FEEDS = {
    "same": (strs("abc", "de"), strs("x", "")),
    "broadcast": (strs("a", "b", "c"), strs("!")),
    "2d": (strs("a", "b", shape=(2, 1)), strs("1", "2", "3")),
    "scalar": (strs("x", shape=()), strs("y", shape=())),
    "empty_strings": (strs("", ""), strs("", "z")),
    "empty_tensor": (strs(shape=(0, 2)), strs("a", "b")),
    "utf8": (strs("日本", "ß"), strs("語", "🙂")),
}


@pytest.mark.parametrize("case", sorted(CONCAT_FEEDS))
def test_string_concat(case):
    a, b = CONCAT_FEEDS[case]
    check(one("StringConcat", {"a": a, "b": b}, [S]), {"a": a, "b": b})


def test_strings_and_numbers_in_one_fused_node():
    """StringConcat -> Equal (string -> bool) -> Cast -> Add, and LabelEncoder string -> int64
    -> Mul: one fused node on MLX; the bool and int64 results are ordinary tensors."""
    nodes = [
        helper.make_node("StringConcat", ["a", "b"], ["ab"]),
        helper.make_node("Equal", ["ab", "c"], ["eq"]),
        helper.make_node("Cast", ["eq"], ["eqf"], to=F32),
        helper.make_node("Add", ["eqf", "w"], ["sum"]),
        helper.make_node("LabelEncoder", ["ab"], ["ids"], domain=ML, keys_strings=["xy", "zz"], values_int64s=[3, 4]),
        helper.make_node("Mul", ["ids", "k"], ["scaled"]),
    ]
    m = model(
        nodes,
        [("a", S, [3]), ("b", S, [3]), ("c", S, [3]), ("w", F32, [3]), ("k", I64, [3])],
        [("sum", F32), ("scaled", I64), ("ab", S)],
        ml_opset=4,
    )
    feeds = {
        "a": strs("x", "z", "q"),
        "b": strs("y", "z", ""),
        "c": strs("xy", "zy", "q"),
        "w": np.array([0.5, 1.5, 2.5], np.float32),
        "k": np.array([10, 100, 1000], np.int64),
    }
    check(m, feeds)
    session = make_session(m, mlx=True)
    run(session, feeds)
    assert_all_on_mlx(session)


def test_string_initializer_is_read():
    """A string initializer reaches the kernel as a constant (never an MLX array)."""
    init = helper.make_tensor("suffix", S, [1], [b".txt"])
    m = model([helper.make_node("StringConcat", ["a", "suffix"], ["y"])], [("a", S, [2])], [("y", S)], initializers=[init])
    check(m, {"a": strs("a", "b")})


# ---------------------------------------------------------------------------------------------
# StringSplit


SPLIT_CASES = {
    "dot": (strs("a.b.c", "d", "", "e."), dict(delimiter=".")),
    "consecutive": (strs("a--b---c", "-"), dict(delimiter="-")),
    "multichar": (strs("a::b", "::", "x:y"), dict(delimiter="::")),
    "empty_delimiter": (strs("  hello   world ", "x", "   "), dict(delimiter="")),
    "no_delimiter": (strs("a b  c", " lead", "trail  "), {}),
    "maxsplit_0": (strs("a.b.c", "x"), dict(delimiter=".", maxsplit=0)),
    "maxsplit_1": (strs("a.b.c", "x.y"), dict(delimiter=".", maxsplit=1)),
    "maxsplit_whitespace": (strs("a b  c  ", " x  y "), dict(maxsplit=1)),
    "maxsplit_huge": (strs("a.b", "c"), dict(delimiter=".", maxsplit=2**62)),
    "2d": (strs("a b", "c", "d e f", "", shape=(2, 2)), {}),
    "empty_tensor": (strs(shape=(0,)), dict(delimiter=".")),
    "utf8": (strs("日本.語", "ß.🙂.é"), dict(delimiter=".")),
}


@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_string_split(case):
    x, attrs = SPLIT_CASES[case]
    check(one("StringSplit", {"x": x}, [S, I64], **attrs), {"x": x})


# ---------------------------------------------------------------------------------------------
# RegexFullMatch


REGEX_CASES = {
    "basic": (r"www\.[\w.-]+\.\bcom\b", strs("www.google.com", "www.facebook.com", "www.bbc.co.uk")),
    "email": (r"(\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$)", strs("account@gmail.com", "a@x.com", " b@yahoo.com", "", shape=(2, 2))),
    "digits": (r"\d{3}-\d{4}", strs("555-1234", "55-12345", "٣٣٣-١٢٣٤")),
    "ascii_word": (r"\w+", strs("hello", "héllo", "_x1")),
    "non_word": (r"\W+", strs("é!", " ", "a")),
    "case_insensitive": (r"(?i)abc", strs("ABC", "aBc", "abd")),
    "alternation": (r"cat|dog", strs("cat", "dog", "catdog")),
    "dot_utf8": (r"..", strs("日本", "ab", "a")),
    "literal_brace": (r"a{x}", strs("a{x}", "ax")),
    "empty_tensor": (r"a+", strs(shape=(2, 0))),
    "empty_pattern": (r"", strs("", "a")),
}


@pytest.mark.parametrize("case", sorted(REGEX_CASES))
def test_regex_full_match(case):
    pattern, x = REGEX_CASES[case]
    check(one("RegexFullMatch", {"x": x}, [B], pattern=pattern), {"x": x})


def test_regex_invalid_pattern_fails_as_on_cpu(mlx_ep):
    """RE2 refuses the pattern: the node stays on ORT's CPU EP, whose kernel fails at session
    creation (a clean error either way, no crash)."""
    m = one("RegexFullMatch", {"x": strs("a")}, [B], pattern="(a")
    with pytest.raises(Exception, match="(?i)regex|pattern"):
        make_session(m, mlx=False)
    with pytest.raises(Exception, match="(?i)regex|pattern"):
        make_session(m, mlx=True)


def test_regex_pattern_the_regex_crate_lacks_stays_on_cpu():
    r"""``\C`` (any byte) is RE2 syntax the ``regex`` crate lacks: declined, ORT's CPU EP runs it."""
    m = one("RegexFullMatch", {"x": strs("ab", "a")}, [B], pattern=r"a\C")
    feeds = {"x": strs("ab", "a")}
    expected = run(make_session(m, mlx=False), feeds)
    session = make_session(m, mlx=True)
    assert_outputs_match(run(session, feeds), expected)
    assert_on_cpu(session, ["RegexFullMatch"])


# ---------------------------------------------------------------------------------------------
# StringNormalizer


def normalizer_reference(x: np.ndarray, case: str, sensitive: bool, stopwords: Sequence[str]) -> np.ndarray:
    """ORT's StringNormalizer on inputs whose case mapping is one character per character."""
    lower = str.lower
    if sensitive:
        kept = [s for s in x.ravel() if s not in set(stopwords)]
    else:
        stops = {lower(w) for w in stopwords}
        kept = [s for s in x.ravel() if lower(s) not in stops]
    change = {"LOWER": str.lower, "UPPER": str.upper}.get(case, lambda s: s)
    out = [change(s) for s in kept] or [""]
    return np.array(out, dtype=object).reshape((1, -1) if x.ndim == 2 else (-1,))


NORMALIZER_X = {
    "1d": strs("monday", "Tuesday", "MONDAY", "été", "Ünïcode"),
    "2d": strs("monday", "tuesday", "Monday", "x", shape=(1, 4)),
}


@pytest.mark.parametrize("shape", sorted(NORMALIZER_X))
@pytest.mark.parametrize("case", ["NONE", "LOWER", "UPPER", None])
@pytest.mark.parametrize("sensitive", [0, 1])
@pytest.mark.parametrize("stopwords", [[], ["monday"], ["MONDAY", "été"]])
def test_string_normalizer(shape, case, sensitive, stopwords):
    x = NORMALIZER_X[shape]
    attrs = dict(is_case_sensitive=sensitive)
    if case is not None:
        attrs["case_change_action"] = case
    if stopwords:
        attrs["stopwords"] = stopwords
    m = one("StringNormalizer", {"x": x}, [S], opset=10, **attrs)
    try:
        expected = run(make_session(m, mlx=False), {"x": x})
    except Exception as e:  # noqa: BLE001 - ORT's CPU EP lacks the en_US.UTF-8 locale here
        assert "locale" in str(e), e
        expected = [normalizer_reference(x, case or "NONE", bool(sensitive), stopwords)]
    check(m, {"x": x}, expected=expected)


@pytest.mark.parametrize("locale", ["en_US.UTF-8", "en_US", "C"])
def test_string_normalizer_locales(locale):
    x = strs("Abc", "xyZ")
    m = one("StringNormalizer", {"x": x}, [S], opset=10, case_change_action="UPPER", is_case_sensitive=1, locale=locale)
    check(m, {"x": x}, expected=[strs("ABC", "XYZ")])


def cpu_or(m, feeds, reference):
    """ORT's CPU EP's outputs, or ``reference`` where it lacks the locale (ORT 1.23 builds the
    locale in every non-trivial StringNormalizer run)."""
    try:
        return run(make_session(m, mlx=False), feeds)
    except Exception as e:  # noqa: BLE001
        assert "locale" in str(e), e
        return reference


def test_string_normalizer_everything_dropped():
    x = strs("monday", shape=(1, 1))
    m = one("StringNormalizer", {"x": x}, [S], opset=10, is_case_sensitive=1, stopwords=["monday"])
    out = check(m, {"x": x}, expected=cpu_or(m, {"x": x}, [strs("", shape=(1, 1))]))
    assert out[0].shape == (1, 1) and out[0][0, 0] == ""


def test_string_normalizer_other_locale_stays_on_cpu():
    """A locale other than en_US / C where case is mapped: declined, so ORT's CPU EP takes the
    node (and fails here as it does alone when the machine lacks that locale)."""
    x = strs("a")
    m = one("StringNormalizer", {"x": x}, [S], opset=10, case_change_action="UPPER", locale="tr_TR.UTF-8")
    try:
        expected = run(make_session(m, mlx=False), {"x": x})
    except Exception as e:  # noqa: BLE001
        with pytest.raises(Exception, match="locale"):  # at session creation or (ORT 1.23) run
            run(make_session(m, mlx=True), {"x": x})
        assert "locale" in str(e)
        return
    session = make_session(m, mlx=True)
    assert_outputs_match(run(session, {"x": x}), expected)
    assert_on_cpu(session, ["StringNormalizer"])


def test_string_normalizer_unused_locale_is_claimed():
    """Without a case change or case-blind stopwords the locale is never read: claimed."""
    x = strs("Abc", "monday")
    m = one("StringNormalizer", {"x": x}, [S], opset=10, is_case_sensitive=1, stopwords=["monday"], locale="tr_TR.UTF-8")
    check(m, {"x": x}, expected=cpu_or(m, {"x": x}, [strs("Abc")]))


# ---------------------------------------------------------------------------------------------
# LabelEncoder with strings


def t(name, dtype, values):
    return helper.make_tensor(name, dtype, [len(values)], values)


LABEL_CASES = {
    # (ml opset, input, output type, attributes)
    "string_int": (2, strs("a", "b", "c", "a"), I64, dict(keys_strings=["a", "b"], values_int64s=[1, 2])),
    "string_int_default": (3, strs("a", "q"), I64, dict(keys_strings=["a"], values_int64s=[7], default_int64=42)),
    "string_float": (2, strs("a", "q"), F32, dict(keys_strings=["a", "b"], values_floats=[0.5, 1.5], default_float=9.0)),
    "int_string": (2, np.array([1, 5, 2], np.int64), S, dict(keys_int64s=[1, 2], values_strings=["one", "two"])),
    "int_string_default": (4, np.array([[1, 5], [2, 2]], np.int64), S, dict(keys_int64s=[1, 2], values_strings=["one", "two"], default_string="?")),
    "float_string": (4, np.array([0.5, -0.0, np.nan, 3.0], np.float32), S, dict(keys_floats=[0.5, 0.0, float("nan")], values_strings=["half", "zero", "nan"])),
    "string_string": (4, strs("日本", "x", ""), S, dict(keys_strings=["日本", ""], values_strings=["japan", "empty"])),
    "duplicates_first_wins": (2, strs("a", "b"), I64, dict(keys_strings=["a", "a", "b"], values_int64s=[1, 2, 3])),
    "tensor_mapping": (4, strs("a", "b", "z"), TensorProto.INT16, dict(keys_tensor=t("k", S, [b"a", b"b"]), values_tensor=t("v", TensorProto.INT16, [3, 4]), default_tensor=t("d", TensorProto.INT16, [42]))),
    "tensor_values_only": (4, strs("a", "z"), I64, dict(keys_strings=["a"], values_tensor=t("v", I64, [5]), default_tensor=t("d", I64, [-7]))),
    "string_default_tensor": (4, np.array([1, 9], np.int64), S, dict(keys_int64s=[1], values_strings=["one"], default_tensor=t("d", S, [b"none"]))),
    "empty_input": (4, strs(shape=(0,)), I64, dict(keys_strings=["a"], values_int64s=[1])),
    "string_double": (4, strs("a", "q"), TensorProto.DOUBLE, dict(keys_strings=["a"], values_tensor=t("v", TensorProto.DOUBLE, [2.5]))),
}


@pytest.mark.parametrize("case", sorted(LABEL_CASES))
def test_label_encoder_strings(case):
    ml, x, out, attrs = LABEL_CASES[case]
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, **attrs)
    xt = S if x.dtype == object else helper.np_dtype_to_tensor_dtype(x.dtype)
    m = model([node], [("x", xt, x.shape)], [("y", out)], opset=17, ml_opset=ml)
    check(m, {"x": x})


@pytest.mark.parametrize("direction", ["string_to_int", "int_to_string"])
def test_label_encoder_opset1_classes(direction):
    attrs = dict(classes_strings=["a", "b", "c", "a"], default_int64=-5, default_string="none")
    if direction == "string_to_int":
        x, xt, out = strs("a", "b", "c", "q"), S, I64
    else:
        x, xt, out = np.array([0, 2, 3, 7, -1], np.int64), I64, S
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, **attrs)
    m = model([node], [("x", xt, x.shape)], [("y", out)], opset=17, ml_opset=1)
    check(m, {"x": x})


# ---------------------------------------------------------------------------------------------
# Hostile inputs


def bad_utf8_model(tail: onnx.NodeProto, out_type: int) -> onnx.ModelProto:
    """``c = StringConcat(x, bad)`` with ``bad`` an initializer of malformed UTF-8 (ORT's Python
    binding sends ``str`` only, so malformed bytes come from the model), then ``tail`` on ``c``."""
    bad = helper.make_tensor("bad", S, [1], [b"\xff\xfe"])
    return model([helper.make_node("StringConcat", ["x", "bad"], ["c"]), tail], [("x", S, [2])], [("y", out_type)], initializers=[bad])


@pytest.mark.parametrize(
    "tail",
    [
        helper.make_node("Equal", ["c", "c"], ["y"]),
        helper.make_node("RegexFullMatch", ["c"], ["y"], pattern="a.*"),
        helper.make_node("RegexFullMatch", ["c"], ["y"], pattern="a(?s:.)*"),
    ],
    ids=["equal", "regex", "regex_dotall"],
)
def test_malformed_utf8_bytewise_ops_match_cpu(tail):
    """Equal compares bytes; RegexFullMatch, as RE2, matches no malformed byte with '.': no
    error, the same results as ORT's CPU EP."""
    check(bad_utf8_model(tail, B), {"x": strs("a", "b")})


def test_malformed_utf8_normalizer_fails_cleanly():
    m = bad_utf8_model(helper.make_node("StringNormalizer", ["c"], ["y"], is_case_sensitive=1, stopwords=["zz"]), S)
    feeds = {"x": strs("a", "b")}
    with pytest.raises(Exception, match="UTF-8|locale"):  # ORT 1.23 fails on its locale first
        run(make_session(m, mlx=False), feeds)
    session = make_session(m, mlx=True)
    with pytest.raises(Exception, match="UTF-8"):
        run(session, feeds)
    if hasattr(ort.InferenceSession, "get_provider_graph_assignment_info"):
        # ORT 1.23 reads placement from a profile of a run that succeeded
        assert_on_mlx(session, ["StringNormalizer", "StringConcat"])


def test_split_result_too_large_fails_cleanly():
    """One string of a million delimiters among many: the padded result would hold 2e8
    strings; the kernel refuses it with an error (the CPU EP would allocate it), and the
    session stays usable."""
    node = helper.make_node("StringSplit", ["x"], ["y0", "y1"], delimiter=".")
    m = model([node], [("x", S, ["n"])], [("y0", S), ("y1", I64)])
    x = np.array([". " * (1 << 20)] + ["x"] * 200, dtype=object)
    session = make_session(m, mlx=True)
    with pytest.raises(Exception, match="bound"):
        run(session, {"x": x})
    small = {"x": strs("a.b", "c")}
    assert_outputs_match(run(session, small), run(make_session(m, mlx=False), small))
    assert_on_mlx(session, ["StringSplit"])
