# Device functions (.func) of a module, inlined at their calls (phobos/run/emulator/inline.py): arguments
# and results through the calling sequence's .param variables, early returns, guarded calls, functions
# calling functions, several calls of one function (its labels renamed apart), and recursion and calls
# that do not match the function refused.
from __future__ import annotations

import re

import numpy as np
import pytest

from phobos.run.emulator import Module, PtxSyntaxError, UnsupportedPtx

from .emulator_support import assert_valid_ptx

FUNCTIONS = """
.func (.param .b32 clamp_retval) clamp(.param .b32 clamp_x, .param .b32 clamp_limit);
.func (.param .b32 clamp_retval) clamp(.param .b32 clamp_x, .param .b32 clamp_limit)
{
    .reg .pred %p;
    .reg .b32 %r<3>;
    ld.param.b32 %r1, [clamp_x];
    ld.param.b32 %r2, [clamp_limit];
    setp.le.s32 %p, %r1, %r2;
    @%p bra $L__small;
    st.param.b32 [clamp_retval], %r2;
    ret;
$L__small:
    st.param.b32 [clamp_retval], %r1;
    ret;
}
.func (.param .b32 twice_retval) twice_clamped(.param .b32 twice_x)
{
    .reg .b32 %r<3>;
    ld.param.b32 %r1, [twice_x];
    add.s32 %r1, %r1, %r1;
    {
    .param .b32 a;
    .param .b32 b;
    .param .b32 c;
    st.param.b32 [a], %r1;
    st.param.b32 [b], 50;
    call.uni (c), clamp, (a, b);
    ld.param.b32 %r2, [c];
    }
    st.param.b32 [twice_retval], %r2;
    ret;
}
"""

KERNEL = """
.visible .entry k(.param .u64 out)
{
    .reg .pred %q;
    .reg .b32 %r<6>;
    .reg .b64 %rd<3>;
    mov.u32 %r1, %tid.x;
    mov.u32 %r4, -1;
    {
    .param .b32 x;
    .param .b32 limit;
    .param .b32 result;
    st.param.b32 [x], %r1;
    st.param.b32 [limit], 20;
    call.uni (result), clamp, (x, limit);
    ld.param.b32 %r2, [result];
    }
    {
    .param .b32 x;
    .param .b32 result;
    st.param.b32 [x], %r1;
    call (result), twice_clamped, (x);
    ld.param.b32 %r3, [result];
    }
    setp.lt.u32 %q, %r1, 8;
    {
    .param .b32 x;
    .param .b32 limit;
    .param .b32 result;
    st.param.b32 [x], %r1;
    st.param.b32 [limit], 3;
    @%q call (result), clamp, (x, limit);
    ld.param.b32 %r5, [result];
    }
    selp.b32 %r4, %r5, %r4, %q;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r1, 12;
    add.s64 %rd1, %rd1, %rd2;
    st.global.u32 [%rd1], %r2;
    st.global.u32 [%rd1+4], %r3;
    st.global.u32 [%rd1+8], %r4;
    ret;
}
"""

HEADER = ".version 8.0\n.target sm_80\n.address_size 64\n"


def test_functions_are_inlined_at_their_calls():
    text = HEADER + FUNCTIONS + KERNEL
    assert_valid_ptx(text)
    out = np.zeros((64, 3), np.int32)
    Module(text, "calls.ptx").launch("k", 1, 64, [out])
    t = np.arange(64)
    np.testing.assert_array_equal(out[:, 0], np.minimum(t, 20))
    np.testing.assert_array_equal(out[:, 1], np.minimum(2 * t, 50))
    np.testing.assert_array_equal(out[:, 2], np.where(t < 8, np.minimum(t, 3), -1))


def test_recursion_is_unsupported():
    text = HEADER + """
.func (.param .b32 f_retval) f(.param .b32 f_x)
{
    .reg .b32 %r<2>;
    ld.param.b32 %r1, [f_x];
    {
    .param .b32 a;
    .param .b32 b;
    st.param.b32 [a], %r1;
    call (b), f, (a);
    ld.param.b32 %r1, [b];
    }
    st.param.b32 [f_retval], %r1;
    ret;
}
.visible .entry k()
{
    .reg .b32 %r<2>;
    {
    .param .b32 a;
    .param .b32 b;
    st.param.b32 [a], 1;
    call (b), f, (a);
    }
    ret;
}
"""
    assert_valid_ptx(text)
    with pytest.raises(UnsupportedPtx, match=r"calls of f nest more than 16 deep \(recursion is not supported\)"):
        Module(text, "recursive.ptx")


@pytest.mark.parametrize("call, message", [
    ("call.uni (result), clamp, (x);", "call of clamp with 1 arguments; it takes 2"),
    ("call.uni clamp, (x, limit);", "call of clamp without its result; it returns one"),
])
def test_a_call_that_does_not_match_the_function_is_reported(call, message):
    """(ptxas refuses both: "Call has wrong number of parameters".)"""
    text = HEADER + FUNCTIONS + KERNEL.replace("call.uni (result), clamp, (x, limit);", call)
    with pytest.raises(PtxSyntaxError, match=rf"calls.ptx:\d+: {re.escape(message)}"):
        Module(text, "calls.ptx")
