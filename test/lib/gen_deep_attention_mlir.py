#!/usr/bin/env python3
"""Writes a moe-dialect function of L attention layers with grouped-query
heads, for moe-fuse-attention's depth test.

    gen_deep_attention_mlir.py L > deep.mlir

Layer l takes x_l [1, s, 16]: queries of 2 heads and keys and values of one
head (projections, reshape by [1, -1, heads, 8], transpose), the keys and
values repeated to 2 heads as transformers' repeat_kv exports it, with the
sequence size of the expand and reshape taken from the function's input x_0
by moe.dim; softmax(q k^T) v back to [1, s, 16] and added to x_l. Proving
the last layer's copies follows its keys' size back through every layer
before it.
"""

import sys


def main():
    layers = int(sys.argv[1])
    t = {
        "x": "tensor<1x?x16xf32>",
        "q": "tensor<1x?x2x8xf32>",
        "qh": "tensor<1x2x?x8xf32>",
        "k": "tensor<1x?x8xf32>",
        "k4": "tensor<1x?x1x8xf32>",
        "kh": "tensor<1x1x?x8xf32>",
        "ku": "tensor<1x1x1x?x8xf32>",
        "ke": "tensor<1x1x2x?x8xf32>",
        "kt": "tensor<1x2x8x?xf32>",
        "s": "tensor<1x2x?x?xf32>",
    }
    out = [f"func.func @deep(%x0: {t['x']}, %wq: tensor<16x16xf32>, "
           f"%wk: tensor<16x8xf32>, %wv: tensor<16x8xf32>) -> {t['x']} {{"]
    emit = out.append
    emit("  %zero = moe.constant dense<0> : tensor<1xi64>")
    emit("  %axis2 = moe.constant dense<2> : tensor<1xi64>")
    emit("  %qsplit = moe.constant dense<[1, -1, 2, 8]> : tensor<4xi64>")
    emit("  %ksplit = moe.constant dense<[1, -1, 1, 8]> : tensor<4xi64>")
    emit("  %merge = moe.constant dense<[1, -1, 16]> : tensor<3xi64>")
    emit("  %head5 = moe.constant dense<[1, 1, 2]> : tensor<3xi64>")
    emit("  %head4 = moe.constant dense<[1, 2]> : tensor<2xi64>")
    emit("  %d = moe.constant dense<8> : tensor<1xi64>")
    emit(f"  %s0 = moe.dim %x0, 1 : {t['x']}")
    emit("  %s1 = moe.unsqueeze %s0, %zero : (tensor<i64>, tensor<1xi64>) "
         "-> tensor<1xi64>")
    emit("  %shape5 = moe.concat %head5, %s1, %d {axis = 0 : i64} : "
         "(tensor<3xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<5xi64>")
    emit("  %shape4 = moe.concat %head4, %s1, %d {axis = 0 : i64} : "
         "(tensor<2xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>")
    for l in range(layers):
        x = f"%x{l}"
        emit(f"  %q{l} = moe.mat_mul {x}, %wq : ({t['x']}, tensor<16x16xf32>) "
             f"-> {t['x']}")
        emit(f"  %q4_{l} = moe.reshape %q{l}, %qsplit : ({t['x']}, "
             f"tensor<4xi64>) -> {t['q']}")
        emit(f"  %qh{l} = moe.transpose %q4_{l} {{perm = array<i64: 0, 2, 1, "
             f"3>}} : ({t['q']}) -> {t['qh']}")
        for name, w in (("k", "%wk"), ("v", "%wv")):
            p = f"%{name}{l}"
            emit(f"  {p} = moe.mat_mul {x}, {w} : ({t['x']}, "
                 f"tensor<16x8xf32>) -> {t['k']}")
            emit(f"  {p}_4 = moe.reshape {p}, %ksplit : ({t['k']}, "
                 f"tensor<4xi64>) -> {t['k4']}")
            emit(f"  {p}_h = moe.transpose {p}_4 {{perm = array<i64: 0, 2, "
                 f"1, 3>}} : ({t['k4']}) -> {t['kh']}")
            emit(f"  {p}_u = moe.unsqueeze {p}_h, %axis2 : ({t['kh']}, "
                 f"tensor<1xi64>) -> {t['ku']}")
            emit(f"  {p}_e = moe.expand {p}_u, %shape5 : ({t['ku']}, "
                 f"tensor<5xi64>) -> {t['ke']}")
            emit(f"  {p}_r = moe.reshape {p}_e, %shape4 : ({t['ke']}, "
                 f"tensor<4xi64>) -> {t['qh']}")
        emit(f"  %kt{l} = moe.transpose %k{l}_r {{perm = array<i64: 0, 1, 3, "
             f"2>}} : ({t['qh']}) -> {t['kt']}")
        emit(f"  %sc{l} = moe.mat_mul %qh{l}, %kt{l} : ({t['qh']}, {t['kt']}) "
             f"-> {t['s']}")
        emit(f"  %p{l} = moe.softmax %sc{l} : ({t['s']}) -> {t['s']}")
        emit(f"  %o{l} = moe.mat_mul %p{l}, %v{l}_r : ({t['s']}, {t['qh']}) "
             f"-> {t['qh']}")
        emit(f"  %ot{l} = moe.transpose %o{l} {{perm = array<i64: 0, 2, 1, "
             f"3>}} : ({t['qh']}) -> {t['q']}")
        emit(f"  %om{l} = moe.reshape %ot{l}, %merge : ({t['q']}, "
             f"tensor<3xi64>) -> {t['x']}")
        emit(f"  %x{l + 1} = moe.add {x}, %om{l} : ({t['x']}, {t['x']}) -> "
             f"{t['x']}")
    emit(f"  return %x{layers} : {t['x']}")
    emit("}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
