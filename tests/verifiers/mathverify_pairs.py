"""A generator of (reference, response) pairs over the semantics math-verify's own test suite
settles, and math-verify as the oracle, graded the way that suite grades.

What the suite settles (read from math-verify 0.9's tests, written here in our own words):

* numbers in their spellings: fractions (``\\frac``, ``\\dfrac``, ``a/b``), decimals (``.5``),
  signs, thousands separators (``1,234``, ``1{,}234``, ``1,\\!234``), and plain-text numbers
  (``1 000`` is 1000 and ``1,22`` is 1.22 outside math);
* lists: ``a, b`` in math is a set (order and repeats ignored), a parenthesised ``(a, b)`` a
  tuple (order kept) or an open interval; boxes joined by a short text (``\\boxed{1}, \\boxed{2}``,
  ``\\boxed{1} \\quad\\text{and}\\quad \\boxed{2}``) and math spans joined by "and"/"or"/","
  are one list; boxes far apart are not;
* intervals ``[a, b)`` and their unions, equations ``x = 5`` against ``5``, percentages;
* a response's intermediate boxes and a last box cut off by truncation.

Each pair is built from one value: the reference spells it one way, the response spells it or
a perturbation of it (an element changed, dropped, added; an order swapped; a repeat) another
way, inside prose, a box, several boxes, math delimiters or as plain text.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction

WHOLE_TEXT = r"(?s).+"  # forkgym's documented whole-text fallback: extract=["boxed", WHOLE_TEXT]


@dataclass(frozen=True)
class Pair:
    kind: str  # which family of the generator made it
    reference: str
    response: str
    same: bool  # the response states the reference's value (by construction)


def math_verify_says(reference: str, response: str, precision: int = 6) -> bool:
    """math-verify's verdict, called as its own tests call it (both texts parsed with LaTeX
    and expression extraction, boxes first; then ``verify``)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    targets = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    return bool(verify(parse(reference, targets), parse(response, targets), float_rounding=precision))  # fmt: skip


# -- spelling numbers -------------------------------------------------------------------------


def spell_number(rng: random.Random, value: Fraction, *, plain: bool = False) -> str:
    """One spelling of ``value`` (math unless ``plain``: plain text outside math)."""
    negative = value < 0
    magnitude = -value if negative else value
    sign = "-" if negative else rng.choice(["", "", "", "+"] if not plain else [""])
    if magnitude.denominator == 1:
        n = int(magnitude)
        if n >= 1000 and rng.random() < 0.6:
            grouped = f"{n:,}"
            if plain:
                return sign + rng.choice([grouped, grouped.replace(",", " ")])
            return sign + rng.choice(
                [grouped, grouped.replace(",", "{,}"), grouped.replace(",", ",\\!")]
            )
        return sign + rng.choice([str(n), str(n), f"{n}.0"] if not plain else [str(n)])
    p, q = magnitude.numerator, magnitude.denominator
    terminating = all(f in (2, 5) for f in _prime_factors(q))
    choices = [f"\\frac{{{p}}}{{{q}}}", f"\\dfrac{{{p}}}{{{q}}}", f"{p}/{q}"]
    if terminating:
        decimal = _decimal(magnitude)
        choices += [decimal, decimal]
        if decimal.startswith("0."):
            choices.append(decimal[1:])
        if plain and "." in decimal:
            return sign + rng.choice([decimal, decimal.replace(".", ",")])
    if plain:
        return sign + (f"{p}/{q}" if not terminating else _decimal(magnitude))
    return sign + rng.choice(choices)


def _prime_factors(n: int) -> list[int]:
    out, d = [], 2
    while d * d <= n:
        while n % d == 0:
            out.append(d)
            n //= d
        d += 1
    return out + ([n] if n > 1 else [])


def _decimal(value: Fraction) -> str:
    whole, rest = divmod(value.numerator, value.denominator)
    digits = ""
    while rest and len(digits) < 6:
        rest *= 10
        digits += str(rest // value.denominator)
        rest %= value.denominator
    return f"{whole}.{digits}" if digits else str(whole)


def draw_number(rng: random.Random) -> Fraction:
    kind = rng.random()
    if kind < 0.45:
        return Fraction(rng.randint(-30, 30))
    if kind < 0.6:
        return Fraction(rng.randint(1000, 99_999) * rng.choice([1, -1]))
    if kind < 0.8:
        return Fraction(rng.randint(-9, 9) or 1, rng.choice([2, 3, 4, 5, 6, 8, 10]))
    return Fraction(rng.randint(-999, 999), rng.choice([10, 100, 1000]))


def nudge(rng: random.Random, value: Fraction) -> Fraction:
    """A different value that a careless answer might give."""
    return rng.choice([value + 1, value - 1, -value if value else Fraction(1), value * 2, value / 10 if value else Fraction(3)])  # fmt: skip


# -- answer shapes ------------------------------------------------------------------------------

PROSE_BEFORE = [
    "",
    "Collecting the terms, ",
    "We check each case in turn and find that the answer is ",
    "Therefore the value is ",
]
FAR = " This intermediate value is not the answer yet; we still need to account for the remaining cases carefully. "  # fmt: skip
JOINERS = [", ", " and ", " \\quad\\text{and}\\quad ", ",\\ ", " or "]


TAILS = [".", "", " .", "\n\nThis completes the solution.", " and $x^{2}$ is positive."]


def _env(rng: random.Random, body: str) -> str:
    left = rng.choice(["$", "", "\\[ ", "\\( ", "$$"])
    return left + body + {"$": "$", "": "", "\\[ ": " \\]", "\\( ": " \\)", "$$": "$$"}[left]


def in_prose(rng: random.Random, answer: str, *, boxes: list[str] | None = None) -> str:
    """A response stating ``answer`` in a box at its end (or ``boxes`` as a list: joined in
    one math environment, each in its own, or bare), possibly after an intermediate box far
    away, and possibly followed by more text."""
    if boxes is None:
        body = _env(rng, f"\\boxed{{{answer}}}")
    elif rng.random() < 0.5:
        body = _env(rng, rng.choice(JOINERS).join(f"\\boxed{{{b}}}" for b in boxes))
    else:
        joiner = rng.choice([", ", " and ", " or ", ", and "])
        body = joiner.join(_env(rng, f"\\boxed{{{b}}}") for b in boxes)
    text = f"{rng.choice(PROSE_BEFORE)}{body}{rng.choice(TAILS)}"
    if rng.random() < 0.25:
        text = f"First we get \\boxed{{{rng.randint(50, 99)}}}.{FAR}" + text
    return text


def number_pair(rng: random.Random) -> Pair:
    value = draw_number(rng)
    same = rng.random() < 0.5
    answer = value if same else nudge(rng, value)
    ref_form = rng.choice(["plain", "dollar", "boxed", "solution"])
    ref = spell_number(rng, value, plain=ref_form == "plain")
    reference = {"plain": ref, "dollar": f"${ref}$", "boxed": f"\\boxed{{{ref}}}",
                 "solution": f"So the total is $\\boxed{{{ref}}}$."}[ref_form]  # fmt: skip
    resp_form = rng.choice(["prose", "prose", "plain", "dollar"])
    spelled = spell_number(rng, answer, plain=resp_form == "plain")
    response = {"prose": lambda: in_prose(rng, spelled), "plain": lambda: spelled,
                "dollar": lambda: f"${spelled}$"}[resp_form]()  # fmt: skip
    return Pair("number", reference, response, same)


def _elements(rng: random.Random, k: int) -> list[Fraction]:
    values: list[Fraction] = []
    while len(values) < k:
        v = Fraction(rng.randint(-12, 12)) if rng.random() < 0.8 else Fraction(rng.randint(1, 9), rng.choice([2, 3]))  # fmt: skip
        if v not in values:
            values.append(v)
    return values


def _perturb_list(rng: random.Random, items: list[Fraction], ordered: bool) -> tuple[list[Fraction], bool]:  # fmt: skip
    """A variant of a list and whether it still equals the original (as a set, or a tuple)."""
    choice = rng.choice(["same", "same", "reorder", "repeat", "change", "drop", "add"])
    out = list(items)
    if choice == "reorder" and len(out) > 1:
        out = out[1:] + out[:1]
        return out, not ordered
    if choice == "repeat":
        out.append(rng.choice(out))
        return out, not ordered
    if choice == "change":
        i = rng.randrange(len(out))
        out[i] = nudge(rng, out[i])
        return out, out[i] == items[i]
    if choice == "drop" and len(out) > 1:
        out.pop(rng.randrange(len(out)))
        return out, False
    if choice == "add":
        extra = max(items) + 1
        out.append(extra)
        return out, False
    return out, True


def list_pair(rng: random.Random) -> Pair:
    """Sets of solutions: ``a, b`` in a box, braces, several boxes, math spans."""
    items = _elements(rng, rng.randint(2, 4))
    variant, same = _perturb_list(rng, items, ordered=False)
    ref_items = [spell_number(rng, v) for v in items]
    ref_form = rng.choice(["dollar", "boxed", "boxes", "spans", "solution"])
    joined = ", ".join(ref_items)
    reference = {
        "dollar": f"${joined}$",
        "boxed": f"\\boxed{{{joined}}}",
        "boxes": ", ".join(f"$\\boxed{{{x}}}$" for x in ref_items),
        "spans": " and ".join(f"${x}$" for x in ref_items),
        "solution": f"The solutions are $x = \\boxed{{{joined}}}$.",
    }[ref_form]
    resp_items = [spell_number(rng, v) for v in variant]
    resp_form = rng.choice(["one_box", "braces", "boxes", "dollar"])
    if resp_form == "one_box":
        response = in_prose(rng, ", ".join(resp_items))
    elif resp_form == "braces":
        response = in_prose(rng, "\\{" + ", ".join(resp_items) + "\\}")
    elif resp_form == "boxes":
        response = in_prose(rng, "", boxes=resp_items)
    else:
        response = f"${', '.join(resp_items)}$"
    return Pair("list", reference, response, same)


def tuple_pair(rng: random.Random) -> Pair:
    """Ordered answers: points and lists of points."""
    points = [tuple(_elements(rng, 2)) for _ in range(rng.randint(1, 3))]
    same = True
    variant = list(points)
    how = rng.choice(["same", "swap_inside", "reorder_points", "change"])
    if how == "swap_inside":
        i = rng.randrange(len(variant))
        variant[i] = (variant[i][1], variant[i][0])
        same = False
    elif how == "reorder_points" and len(variant) > 1:
        variant = variant[::-1]  # a set of points: still the same
    elif how == "change":
        i = rng.randrange(len(variant))
        variant[i] = (nudge(rng, variant[i][0]), variant[i][1])
        same = False

    def spell(ps: list[tuple[Fraction, ...]]) -> list[str]:
        return [f"({spell_number(rng, a)}, {spell_number(rng, b)})" for a, b in ps]

    ref = spell(points)
    reference = rng.choice([f"${', '.join(ref)}$", f"\\boxed{{{', '.join(ref)}}}"])
    resp = spell(variant)
    if len(resp) > 1 and rng.random() < 0.5:
        response = in_prose(rng, "", boxes=resp)
    else:
        response = in_prose(rng, ", ".join(resp))
    return Pair("tuple", reference, response, same)


def interval_pair(rng: random.Random) -> Pair:
    a, b = sorted(_elements(rng, 2))
    left, right = rng.choice("[("), rng.choice("])")
    same = rng.random() < 0.5
    l2, r2 = (left, right) if same else rng.choice([("[" if left == "(" else "(", right), (left, "]" if right == ")" else ")")])  # fmt: skip
    reference = f"${left}{spell_number(rng, a)}, {spell_number(rng, b)}{right}$"
    inner = f"{l2}{spell_number(rng, a)}, {spell_number(rng, b)}{r2}"
    if rng.random() < 0.3:
        inner += f" \\cup ({b + 5}, \\infty)"
        reference = reference[:-1] + f" \\cup ({b + 5}, \\infty)$"
    return Pair("interval", reference, in_prose(rng, inner), same)


def equation_pair(rng: random.Random) -> Pair:
    value = Fraction(rng.randint(-20, 20))
    same = rng.random() < 0.5
    answer = value if same else nudge(rng, value)
    var = rng.choice("xyk")
    reference = rng.choice([f"${var} = {value}$", f"${value}$", f"\\boxed{{{var}={value}}}"])
    spelled = spell_number(rng, answer)
    response = in_prose(rng, rng.choice([spelled, f"{var} = {spelled}", f"{var}={spelled}"]))
    return Pair("equation", reference, response, same)


def symbolic_pair(rng: random.Random) -> Pair:
    a = rng.randint(1, 6)
    forms = {
        "square": (
            [f"(x+{a})^2", f"x^2+{2 * a}x+{a * a}", f"{a * a}+{2 * a}x+x^2"],
            [f"x^2+{a * a}", f"(x-{a})^2"],
        ),
        "root": (
            [f"{a}\\sqrt{{2}}", f"\\sqrt{{{2 * a * a}}}"],
            [f"{a + 1}\\sqrt{{2}}", f"\\sqrt{{{2 * a}}}"],
        ),
        "pi": ([f"\\frac{{{a}\\pi}}{{2}}", f"{a}\\pi/2"], [f"\\frac{{{a}\\pi}}{{3}}"]),
    }
    right, wrong = forms[rng.choice(sorted(forms))]
    same = rng.random() < 0.5
    reference = f"${rng.choice(right)}$"
    return Pair("symbolic", reference, in_prose(rng, rng.choice(right if same else wrong)), same)


def percent_pair(rng: random.Random) -> Pair:
    n = rng.randint(1, 99)
    same = rng.random() < 0.5
    m = n if same else n + rng.choice([1, -1, 10])
    reference = rng.choice([f"${n}\\%$", f"\\boxed{{{n}\\%}}"])
    return Pair("percent", reference, in_prose(rng, rng.choice([f"{m}\\%", f"{m}"])), same)


GAP_WORDS = ["so", "we", "check", "again", "the", "value", "is", "and", "or", "then", "x", "=", ",", ";", ".", "thus", "\\quad", "\\text{and}"]  # fmt: skip


def chain_pair(rng: random.Random) -> Pair:
    """Several boxes with gaps of every length around the chaining thresholds, with and
    without joining words, repeated or different contents; the reference is the last box's
    value or the list of all of them."""
    k = rng.randint(2, 3)
    values = [Fraction(rng.randint(-9, 9)) for _ in range(k)]
    if rng.random() < 0.3:
        values[-2] = values[-1]  # a repeat next to the last box
    gaps = []
    for _ in range(k - 1):
        words = rng.choices(GAP_WORDS, k=rng.randint(0, 18))
        gaps.append(" " + " ".join(words) + " " if words else rng.choice(["", " ", ", "]))
    boxes = [f"\\boxed{{{spell_number(rng, v)}}}" for v in values]
    each = rng.random() < 0.4
    if each:
        boxes = [_env(rng, b) for b in boxes]
    body = boxes[0]
    for gap, box in zip(gaps, boxes[1:], strict=True):
        body += gap + box
    if not each:
        body = _env(rng, body)  # all of them in one math environment, or none
    response = rng.choice(["", "After the work, "]) + body + rng.choice(TAILS)
    target = rng.choice(["last", "all", "first"])
    chosen = {"last": values[-1:], "all": values, "first": values[:1]}[target]
    spelled = ", ".join(spell_number(rng, v) for v in dict.fromkeys(chosen))
    reference = rng.choice([f"${spelled}$", f"\\boxed{{{spelled}}}"])
    return Pair("chain", reference, response, target == "last")


def closing_pair(rng: random.Random) -> Pair:
    """Minerva's closing sentence after intermediate boxes (or none), with a few variants of
    its wording that math-verify does and does not rank with a box."""
    value = draw_number(rng)
    boxed = Fraction(rng.randint(100, 300))
    same = rng.random() < 0.5
    stated = value if same else nudge(rng, value)
    sentence = rng.choice([
        f"Final Answer: The final answer is ${spell_number(rng, stated)}$. I hope it is correct.",
        f"Final Answer: The final answer is ${spell_number(rng, stated)}$. I hope it is correct",
        f"The final answer is ${spell_number(rng, stated)}$. I hope it is correct.",
        f"Final Answer: The final answer is {spell_number(rng, stated)}. I hope it is correct.",
    ])  # fmt: skip
    prefix = rng.choice(["", f"The interest is $\\boxed{{{boxed}}}$ after six months. ", f"So $\\boxed{{{spell_number(rng, value)}}}$.\n"])  # fmt: skip
    reference = rng.choice([f"${spell_number(rng, value)}$", spell_number(rng, value, plain=True)])
    return Pair("closing", reference, prefix + sentence, same)


def truncated_pair(rng: random.Random) -> Pair:
    """A response whose last box is cut off, after an earlier complete box of the answer."""
    value = Fraction(rng.randint(1, 99))
    cut = rng.choice([f"\\boxed{{{value}", "\\boxed{", f"\\boxed{{\\frac{{{value}}}{{"])
    response = f"We get \\boxed{{{value}}} at first. After more steps the answer is {cut}"
    return Pair("truncated", str(value), response, True)


FAMILIES = {
    "number": number_pair,
    "list": list_pair,
    "tuple": tuple_pair,
    "interval": interval_pair,
    "equation": equation_pair,
    "symbolic": symbolic_pair,
    "percent": percent_pair,
    "truncated": truncated_pair,
    "chain": chain_pair,
    "closing": closing_pair,
}
WEIGHTS = {"number": 6, "list": 5, "tuple": 3, "interval": 2, "equation": 2, "symbolic": 2, "percent": 1, "truncated": 1, "chain": 4, "closing": 2}  # fmt: skip


def generate(n: int, seed: int) -> list[Pair]:
    rng = random.Random(seed)
    names = sorted(FAMILIES)
    weights = [WEIGHTS[name] for name in names]
    return [FAMILIES[rng.choices(names, weights)[0]](rng) for _ in range(n)]
