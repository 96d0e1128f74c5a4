"""Which integer abs survives compilation at INT_MIN: each form, then ``where(a > -1, a * -2, a - 5)``, on int32
and int64 (GPU), with the abs stored beside it and not.

torch.abs(INT_MIN) is INT_MIN (the negation wraps), so ``a > -1`` is False there and the select gives ``a - 5``.
Compiled, a form that the compiler takes to be at least 0 folds the comparison to True. Prints, per form, dtype and
storing, abs(INT_MIN) as stored and the select's value at INT_MIN, against torch's.

    python bench/experiments/int_abs.py
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _forms(x_ptr, abs_ptr, above_ptr, FORM: tl.constexpr, STORE_ABS: tl.constexpr):
    i = tl.arange(0, 8)
    x = tl.load(x_ptr + i, mask=i < 5, other=0)
    if FORM == 0:
        a = tl.abs(x)
    elif FORM == 1:
        a = tl.where(x < 0, -x, x)
    elif FORM == 2:
        a = tl.maximum(x, -x)
    elif FORM == 3:
        sign = x >> (x.dtype.primitive_bitwidth - 1)
        a = (x ^ sign) - sign
    elif FORM == 4:
        a = tl.where(x < 0, x * -1, x) * tl.where(x == x, 1, 0)
    else:
        a = tl.inline_asm_elementwise("{ .reg .s64 t; shr.s64 t, $1, 63; xor.b64 $0, $1, t; sub.s64 $0, $0, t; }",
                                      "=l,l", [x.to(tl.int64)], dtype=tl.int64, is_pure=True, pack=1).to(x.dtype)
    if STORE_ABS:
        tl.store(abs_ptr + i, a, mask=i < 5)
    # the pipeline the GPU property suite failed on: abs, then where(a > -1, a * -2, a - 5)
    tl.store(above_ptr + i, tl.where(a > -1, a * -2, a - 5), mask=i < 5)


FORMS = ["tl.abs", "where(x < 0, -x, x)", "maximum(x, -x)", "(x ^ s) - s", "where(x < 0, x * -1, x) * 1",
         "inline asm shr/xor/sub"]


def main():
    for dtype in (torch.int32, torch.int64):
        info = torch.iinfo(dtype)
        x = torch.tensor([info.min, -1, 0, 1, info.max], dtype=dtype, device="cuda")
        a = torch.abs(x)
        want = torch.where(a > -1, a * -2, a - 5).tolist()
        for form, name in enumerate(FORMS):
            for store in (True, False):
                a, above = torch.zeros_like(x), torch.empty_like(x)
                _forms[(1,)](x, a, above, FORM=form, STORE_ABS=store)
                print(f"{str(dtype):12} {name:24} abs stored: {store:1} abs(INT_MIN)={a[0].item():>21} where: "
                      f"{above[0].item():>21} (torch {want[0]}) {'ok' if above.tolist() == want else 'WRONG'}")


if __name__ == "__main__":
    main()
