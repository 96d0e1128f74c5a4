"""@triton.jit functions that bind a name K of their own in each of Python's binding forms, next to the global K
(tests/test_jit_inline.py: the binding-forms table). Each is also plain Python on torch tensors, which is what
its copy must still be."""
import triton

K = 10.0


@triton.jit
def twice(y):
    return y * 2.0


@triton.jit
def lambda_parameter(x):
    scale = lambda K: x * K  # noqa: E731
    return scale(2.0) + K


@triton.jit
def lambda_default_and_keyword_only(x):
    f = lambda y, J=K, *, K=3.0: y * J + K  # noqa: E731  (J's default is read where the lambda is: the global)
    return f(x)


@triton.jit
def lambda_star_parameters(x):
    f = lambda *K, **J: x * K[1] + J["a"]  # noqa: E731
    return f(1.0, 2.0, a=1.0) + K


@triton.jit
def lambda_parameter_named_like_a_jit_function(x):
    return (lambda twice: twice(x))(lambda y: y * 5.0)


@triton.jit
def nested_def_parameter(x):
    def h(K):
        r = x + K
        return r
    return h(1.0) + K


@triton.jit
def nested_def_name(x):
    def K(y):
        return y * 2.0
    return K(x)


@triton.jit
def nested_nonlocal(x):
    K = 1.0

    def bump():
        nonlocal K
        K = K + 1.0
        return K
    return x * bump() + K


@triton.jit
def nested_global(x):
    K = 1.0

    def h():
        global K
        return K
    return x * h() + K


@triton.jit
def class_scope(x):
    class C:
        K = 2.0
        J = K * 3.0

        def m(self):
            return K  # a method does not see the class body's names: the global
    return x * C.J + C().m()


@triton.jit
def list_comprehension_target(x):
    return [x * K for K in (3.0,)][0] + K


@triton.jit
def comprehension_first_iterable_outside(x):
    K = (2.0, 3.0)
    return x * [K * 2.0 for K in K][1]


@triton.jit
def dict_comprehension_target(x):
    return {K: x * K for K in (4.0,)}[4.0] + K


@triton.jit
def two_generators(x):
    return [x * K * J for K in (2.0,) for J in (K, 5.0)][1] + K


@triton.jit
def walrus_in_comprehension(x):
    return [(J := x * K) for K in (2.0,)][0] + J + K


@triton.jit
def walrus(x):
    r = x * (K := 2.0)
    return r + K


@triton.jit
def for_target(x):
    r = x
    for K in range(2):
        r = r + K
    return r + K


@triton.jit
def with_target(x):
    with memoryview(b"ab") as K:
        r = x * K.nbytes
    return r


@triton.jit
def except_target(x):
    r = x
    try:
        r = r + 1 // 0
    except ZeroDivisionError as K:
        r = x + K.args.count(K.args[0])
    return r


@triton.jit
def import_as(x):
    import math as K
    return x * K.pi


@triton.jit
def from_import_as(x):
    from math import pi as K
    return x * K


@triton.jit
def augmented_assignment(x):
    K = 1.0
    K += 2.0
    return x * K


@triton.jit
def annotated_assignment(x):
    K: float = 2.0
    return x * K


@triton.jit
def annotation_then_assignment(x):
    K: float
    K = 4.0
    return x * K


@triton.jit
def deleted(x):
    K = 3.0
    r = x * K
    del K
    return r


@triton.jit
def starred_assignment(x):
    J, *K = 1.0, 2.0, 3.0
    return x * J + K[1]


@triton.jit
def match_capture(x):
    match 2.0:
        case K:
            return x * K


@triton.jit
def match_star_and_rest(x):
    match [1.0, 2.0]:
        case [J, *K]:
            r = x * J + K[0]
    match {"a": 3.0}:
        case {**K}:
            return r + K["a"]


@triton.jit
def global_statement(x):
    global K
    return x * K


@triton.jit
def default_read_outside(x, J=K):
    return x * J
