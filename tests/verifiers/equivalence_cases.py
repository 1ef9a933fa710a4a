"""The table of grading cases: (category, reference, response, expected status).

Shared by the equivalence test (every case through the real verifier) and the fast-path
agreement test (the exact fast path and math-verify must agree wherever the fast path decides).
"""

OK, NO, BAD = "correct", "incorrect", "invalid"

CASES: list[tuple[str, str, str, str]] = [
    # fractions and decimals
    ("fraction", "1/2", r"\boxed{0.5}", OK),
    ("fraction", r"\frac{1}{2}", r"\boxed{\dfrac{1}{2}}", OK),
    ("fraction", r"\frac{3}{4}", r"\boxed{0.75}", OK),
    ("fraction", "0.75", r"\boxed{3/4}", OK),
    ("fraction", r"\frac{2}{3}", r"\boxed{4/6}", OK),
    ("fraction", r"\frac{2}{3}", r"\boxed{0.67}", OK),  # right at its written precision
    ("fraction", r"\frac{2}{3}", r"\boxed{0.66}", NO),  # truncated: 0.0067 away
    ("fraction", "1/3", r"\boxed{0.3333}", OK),
    ("fraction", "1/3", r"\boxed{0.3334}", NO),
    ("fraction", "1/3", r"\boxed{0.3}", NO),  # one significant digit is too coarse to pay
    ("fraction", "1/3", r"\boxed{0.333333}", OK),
    ("fraction", "2/3", r"\boxed{0.666667}", OK),
    ("fraction", r"-\frac{1}{2}", r"\boxed{-0.5}", OK),
    ("fraction", r"\frac{-1}{2}", r"\boxed{-\frac{1}{2}}", OK),
    ("fraction", "1.5", r"\boxed{\tfrac{3}{2}}", OK),
    ("fraction", "0.1", r"\boxed{\frac{1}{10}}", OK),
    ("fraction", r"\frac{5}{8}", r"\boxed{\frac{8}{5}}", NO),
    ("decimal", "2", r"\boxed{2.0}", OK),
    ("decimal", "2", r"\boxed{2.01}", NO),
    ("decimal", "0.5", r"\boxed{.5}", OK),
    ("decimal", "3.14", r"\boxed{3.140}", OK),
    ("decimal", "-2.5", r"\boxed{2.5}", NO),
    # integers
    ("integer", "42", r"So the total is \boxed{42}.", OK),
    ("integer", "42", r"\boxed{43}", NO),
    ("integer", "-7", r"\boxed{-7}", OK),
    ("integer", "7", r"\boxed{-7}", NO),
    ("integer", "100000000000000000001", r"\boxed{100000000000000000000}", NO),
    ("integer", "5", r"\boxed{05}", OK),
    ("integer", "5", r"\boxed{+5}", OK),
    ("integer", "0", r"\boxed{-0}", OK),
    ("integer", "18", r"$\boxed{18}$", OK),
    # thousands separators
    ("thousands", "1000", r"\boxed{1,000}", OK),
    ("thousands", "1234567", r"\boxed{1,234,567}", OK),
    ("thousands", "10000", r"\boxed{10{,}000}", OK),
    ("thousands", "10000", r"\boxed{10,\!000}", OK),
    ("thousands", "1,000", r"\boxed{1000}", OK),
    ("thousands", "1000", r"\boxed{1,001}", NO),
    ("thousands", "1000.5", r"\boxed{1,000.5}", OK),
    # sets
    ("set", r"\{1, 2, 3\}", r"\boxed{\{3, 2, 1\}}", OK),
    ("set", r"\{1, 2\}", r"\boxed{\{1, 3\}}", NO),
    ("set", r"\{-1, 4\}", r"\boxed{\{4,-1\}}", OK),
    # intervals
    ("interval", "[0, 1)", r"\boxed{[0,1)}", OK),
    ("interval", "[0, 1)", r"\boxed{[0,1]}", NO),
    ("interval", r"(-\infty, 3]", r"\boxed{(-\infty,3]}", OK),
    ("interval", r"(2, \infty)", r"\boxed{(2,\infty)}", OK),
    ("interval", r"[1,2] \cup [3,4]", r"\boxed{[1, 2]\cup[3, 4]}", OK),
    ("interval", r"(-\infty, 3]", r"\boxed{(-\infty, 3)}", NO),
    # tuples
    ("tuple", "(1, 2)", r"\boxed{(1,2)}", OK),
    ("tuple", "(3, -4, 5)", r"\boxed{(3,-4,5)}", OK),
    ("tuple", r"(1, \frac{1}{2})", r"\boxed{(1, 0.5)}", OK),
    ("tuple", "(3, -4, 5)", r"\boxed{(3,4,5)}", NO),
    # matrices
    (
        "matrix",
        r"\begin{pmatrix}1&2\\3&4\end{pmatrix}",
        r"\boxed{\begin{pmatrix}1&2\\3&4\end{pmatrix}}",
        OK,
    ),
    (
        "matrix",
        r"\begin{pmatrix}1&2\\3&4\end{pmatrix}",
        r"\boxed{\begin{bmatrix}1&2\\3&4\end{bmatrix}}",
        OK,
    ),
    (
        "matrix",
        r"\begin{pmatrix}1&2\\3&4\end{pmatrix}",
        r"\boxed{\begin{pmatrix}1&2\\4&3\end{pmatrix}}",
        NO,
    ),
    (
        "matrix",
        r"\begin{pmatrix}\frac{1}{2}\\0\end{pmatrix}",
        r"\boxed{\begin{pmatrix}0.5\\0\end{pmatrix}}",
        OK,
    ),
    # symbolic expressions
    ("symbolic", "x^2+2x+1", r"\boxed{(x+1)^2}", OK),
    ("symbolic", "x^2-1", r"\boxed{(x-1)(x+1)}", OK),
    ("symbolic", "x^2-1", r"\boxed{(x-1)^2}", NO),
    ("symbolic", r"\sqrt{2}/2", r"\boxed{\frac{\sqrt{2}}{2}}", OK),
    ("symbolic", r"\frac{\sqrt{2}}{2}", r"\boxed{\frac{1}{\sqrt{2}}}", OK),
    ("symbolic", r"2\sqrt{3}", r"\boxed{\sqrt{12}}", OK),
    ("symbolic", r"\pi", r"\boxed{3.14}", NO),  # written precision is for rational references
    ("symbolic", r"2\pi", r"\boxed{2\pi}", OK),
    ("symbolic", r"3\sqrt{2}", r"\boxed{2\sqrt{3}}", NO),
    # equations
    ("equation", "5", r"\boxed{x=5}", OK),
    ("equation", "x=5", r"\boxed{5}", OK),
    ("equation", "5", r"\boxed{x = 6}", NO),
    ("equation", "y = 2x + 3", r"\boxed{y=3+2x}", OK),
    # percentages
    ("percent", r"50\%", r"\boxed{50\%}", OK),
    ("percent", r"50\%", r"\boxed{50}", OK),
    ("percent", "7", r"\boxed{7\%}", OK),
    ("percent", "0.07", r"\boxed{7\%}", OK),
    ("percent", "7", r"\boxed{0.07}", NO),  # no x100 / x0.01 heuristics on plain numbers
    ("percent", r"25\%", r"\boxed{30\%}", NO),
    # units and text wrappers
    ("units", "12", r"\boxed{12\text{ apples}}", OK),
    ("units", "5", r"\boxed{\$5}", OK),
    ("units", "10", r"\boxed{\text{10}}", OK),
    # extraction: the last box is the answer (with the boxes chained to it by a short joining
    # text: a list, as math-verify reads it); references may carry a box too
    (
        "extraction",
        "2",
        r"first \boxed{1}. Then I checked every case again carefully: \boxed{2}",
        OK,
    ),
    (
        "extraction",
        "1",
        r"first \boxed{1}. Then I checked every case again carefully: \boxed{2}",
        NO,
    ),
    ("extraction", "2", r"first \boxed{1} and finally \boxed{2}", NO),  # the list 1, 2
    ("extraction", "1, 2", r"first \boxed{1} and finally \boxed{2}", OK),
    ("extraction", "3", r"\fbox{3}", OK),
    ("extraction", "3", r"$\boxed 3$", OK),
    ("extraction", r"The answer is $\boxed{\frac{1}{2}}$.", r"\boxed{0.5}", OK),
    ("extraction", r"\frac{1}{2}", r"\boxed{\frac{1}{2}}", OK),
    # invalid: nothing extractable, empty box, truncated box, unparseable answer
    ("invalid", "5", "The answer is 5.", BAD),
    ("invalid", "5", r"\boxed{}", BAD),
    ("invalid", "5", r"\boxed{   }", BAD),
    ("invalid", "5", "", BAD),
    ("invalid", "5", r"so the answer is \boxed{5", BAD),
    ("invalid", "5", r"\boxed{$$}", BAD),
]
