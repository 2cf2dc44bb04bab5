"""Control flow: ``_foreach`` as ONNX Scan, ``_cond`` as If, ``_while_loop`` as Loop (mx.sym.contrib.*).

MXNet src/operator/control_flow.cc: ``_foreach`` runs its subgraph once per slice of its data inputs
along axis 0, threading states through; its inputs are the data, the initial states, then the free
variables the body reads (``in_data_locs`` / ``in_state_locs`` / ``remain_locs`` place each among the
subgraph's variables); the subgraph's heads are the per-step outputs (``num_out_data``, stacked along a
new axis 0) then the new states; the op's outputs are the stacked outputs then the final states. ONNX
Scan orders its body's inputs states-first and its outputs final-states-first; free variables are read
from the outer scope by name. The body is translated with the same translators, into a context that
shares the outer one's names (ONNX names are unique across the model, subgraphs included).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
from onnx import TensorProto, helper

from adapters.mxnet.context import ConversionContext, TensorType
from adapters.mxnet.registry import TRANSLATORS, out, translator
from adapters.mxnet.symbol import MXNode, SymbolGraph
from bridge import provenance
from bridge.errors import BadInputFileError, ExportError, UnsupportedOpError


def _locs(node: MXNode, key: str) -> list[int]:
    text = node.attrs.optional_str(key, "[]") or "[]"
    try:
        value = json.loads(text)
    except ValueError:
        raise BadInputFileError(f"node '{node.name}' ({node.op}): attribute {key}='{text}' is not a list") from None
    if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
        raise BadInputFileError(f"node '{node.name}' ({node.op}): attribute {key}='{text}' is not a list of ints")
    return value


def _body_context(ctx: ConversionContext) -> ConversionContext:
    sub = ConversionContext(ctx.opset)
    sub._names = ctx._names  # one namespace for the model and its subgraphs
    sub._node_names = ctx._node_names
    sub.types = dict(ctx.types)  # outer tensors the body reads keep their types
    sub.consts = dict(ctx.consts)
    sub.origin = ctx.origin
    return sub


def translate_body(ctx: ConversionContext, node: MXNode, graph: SymbolGraph, bound: dict[int, str],
                   copy: str = "") -> list[str]:
    """Translate ``graph``'s op nodes into ``ctx``; ``bound`` names the tensor each variable stands for.
    ``copy`` (a suffix) translates a graph a second time: its nodes' names get the suffix, their provenance
    keeps the MXNet name. Returns the tensors of its heads."""
    if copy:
        graph = dataclasses.replace(graph, nodes=[n if n.is_variable else dataclasses.replace(n, name=n.name + copy)
                                                  for n in graph.nodes])
    lacking = sorted({n.op for n in graph.nodes if not n.is_variable and n.op not in TRANSLATORS})
    if lacking:
        raise UnsupportedOpError({op: [f"{node.name}/{n.name}" for n in graph.nodes if n.op == op] for op in lacking},
                                 framework="mxnet")
    entries: dict[tuple[int, int], str] = {}
    for n in graph.nodes:
        if n.is_variable:
            if n.index not in bound:
                raise BadInputFileError(f"node '{node.name}' ({node.op}): subgraph variable '{n.name}' is not bound "
                                        "to any input of the op")
            entries[(n.index, 0)] = bound[n.index]
            continue
        fn = TRANSLATORS[n.op]
        ctx.origin = provenance.Provenance("mxnet", n.name.removesuffix(copy) if copy else n.name, n.op, provenance.made_by(
            provenance.TRANSLATOR, f"{fn.__module__}:{getattr(fn, '__qualname__', fn.__name__)}"))
        for k, name in enumerate(fn(ctx, n, [entries[e] for e in n.inputs])):
            entries[(n.index, k)] = name
    return [entries[h] for h in graph.heads]


@translator("_foreach")
def _foreach(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    if len(node.subgraphs) != 1:
        raise BadInputFileError(f"node '{node.name}' (_foreach) needs one subgraph, the file gives {len(node.subgraphs)}")
    body_graph = node.subgraphs[0]
    data_locs, state_locs, remain_locs = (_locs(node, k) for k in ("in_data_locs", "in_state_locs", "remain_locs"))
    n_out = node.attrs.optional_int("num_out_data", 0) or 0
    n_data, n_state = len(data_locs), len(state_locs)
    variables = [i for i in body_graph.arg_nodes if body_graph.nodes[i].is_variable] or \
        [n.index for n in body_graph.nodes if n.is_variable]
    if len(inputs) != n_data + n_state + len(remain_locs) or len(body_graph.heads) != n_out + n_state:
        raise BadInputFileError(f"node '{node.name}' (_foreach): {len(inputs)} inputs and {len(body_graph.heads)} "
                                f"subgraph outputs do not fit {n_data} data, {n_state} states and {n_out} outputs")
    sub = _body_context(ctx)
    bound: dict[int, str] = {}
    body_inputs = []
    for kind, locs, outer in (("state", state_locs, inputs[n_data:n_data + n_state]), ("data", data_locs, inputs[:n_data])):
        for loc, src in zip(locs, outer, strict=True):
            var = body_graph.nodes[variables[loc]]
            t = ctx.type(src)
            if t.shape is None:
                raise ExportError(f"node '{node.name}' (_foreach): the rank of its {kind} input '{src}' is unknown")
            shape = t.shape[1:] if kind == "data" else t.shape
            name = sub.fresh(f"{node.name}__{var.name}")
            sub.types[name] = TensorType(t.elem, tuple(shape))
            body_inputs.append(helper.make_tensor_value_info(name, t.elem, list(shape)))
            bound[var.index] = name
    for loc, src in zip(remain_locs, inputs[n_data + n_state:], strict=True):
        bound[variables[loc]] = src  # read from the outer scope
    heads = translate_body(sub, node, body_graph, bound)
    ordered = heads[n_out:] + heads[:n_out]  # Scan: states first
    body_outs = [sub.emit("Identity", [h], 1, name=f"{node.name}__body_out")[0] for h in ordered]
    outputs = [helper.make_value_info(o, sub.type(o).to_proto()) for o in body_outs]
    body = helper.make_graph(sub.nodes, f"{node.name}_body", body_inputs, outputs,
                             initializer=list(sub.initializers.values()))
    ctx.uses_contrib = ctx.uses_contrib or sub.uses_contrib
    total = n_out + n_state
    names = [out(ctx, node, k, total) for k in range(total)]
    steps = (ctx.shape(inputs[0]) or (None,))[0] if n_data else None
    types = [TensorType(sub.type(o).elem, sub.type(o).shape) for o in body_outs[:n_state]]
    for o in body_outs[n_state:]:
        step_shape = sub.type(o).shape
        types.append(TensorType(sub.type(o).elem, None if step_shape is None else (steps, *step_shape)))
    scan_outs = names[n_out:] + names[:n_out]
    ctx.emit("Scan", [*inputs[n_data:n_data + n_state], *inputs[:n_data]], scan_outs, name=node.name,
             out_types=types, body=body, num_scan_inputs=n_data)
    return names


def _branch(ctx: ConversionContext, node: MXNode, graph: SymbolGraph, inputs: list[str], locs: list[int],
            label: str) -> tuple[list[str], ConversionContext]:
    """A subgraph whose variables stand for the op inputs at ``locs``, translated into a context of its own
    (nodes read those tensors from the outer scope), ending in Identity nodes (fresh output names)."""
    sub = _body_context(ctx)
    variables = [n.index for n in graph.nodes if n.is_variable]
    if len(variables) != len(locs) or any(not 0 <= k < len(inputs) for k in locs):
        raise BadInputFileError(f"node '{node.name}' ({node.op}): its {label} subgraph has {len(variables)} inputs, "
                                f"the op binds {len(locs)}")
    heads = translate_body(sub, node, graph, {v: inputs[k] for v, k in zip(variables, locs, strict=True)})
    outs = [sub.emit("Identity", [h], 1, name=f"{node.name}__{label}_out")[0] for h in heads]
    ctx.uses_contrib = ctx.uses_contrib or sub.uses_contrib
    return outs, sub


def _merged(a: TensorType, b: TensorType) -> TensorType:
    """The type both branches' outputs fit: dims that differ become unknown."""
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return TensorType(a.elem, None)
    return TensorType(a.elem, tuple(x if x == y else None for x, y in zip(a.shape, b.shape, strict=True)))


@translator("_cond")
def _cond(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/control_flow.cc (CondParam): subgraphs [condition, then, else], each reading the op
    # inputs at its *_input_locs; the branch taken is the one the condition's single value (nonzero) selects.
    if len(node.subgraphs) != 3:
        raise BadInputFileError(f"node '{node.name}' (_cond) needs three subgraphs, the file gives {len(node.subgraphs)}")
    cond_graph, then_graph, else_graph = node.subgraphs
    cond_vars = [n.index for n in cond_graph.nodes if n.is_variable]
    cond_locs = _locs(node, "cond_input_locs")
    if len(cond_vars) != len(cond_locs) or len(cond_graph.heads) != 1:
        raise BadInputFileError(f"node '{node.name}' (_cond): its condition subgraph does not fit cond_input_locs")
    cond = translate_body(ctx, node, cond_graph, {v: inputs[k] for v, k in zip(cond_vars, cond_locs, strict=True)})[0]
    flag = ctx.emit("Reshape", [ctx.as_bool(cond, f"{node.name}__cond"), ctx.i64([], f"{node.name}__scalar")], 1,
                    name=f"{node.name}__cond_scalar")[0]
    then_outs, then_ctx = _branch(ctx, node, then_graph, inputs, _locs(node, "then_input_locs"), "then")
    else_outs, else_ctx = _branch(ctx, node, else_graph, inputs, _locs(node, "else_input_locs"), "else")
    if len(then_outs) != len(else_outs):
        raise BadInputFileError(f"node '{node.name}' (_cond): the branches give {len(then_outs)} and "
                                f"{len(else_outs)} outputs")
    graphs = []
    for label, outs, sub in (("then", then_outs, then_ctx), ("else", else_outs, else_ctx)):
        graphs.append(helper.make_graph(sub.nodes, f"{node.name}_{label}", [],
                                        [helper.make_value_info(o, sub.type(o).to_proto()) for o in outs],
                                        initializer=list(sub.initializers.values())))
    total = len(then_outs)
    names = [out(ctx, node, k, total) for k in range(total)]
    types = [_merged(then_ctx.type(a), else_ctx.type(b)) for a, b in zip(then_outs, else_outs, strict=True)]
    ctx.emit("If", [flag], names, name=node.name, out_types=types, then_branch=graphs[0], else_branch=graphs[1])
    return names


@translator("_while_loop")
def _while_loop(ctx: ConversionContext, node: MXNode, inputs: list[str]) -> list[str]:
    # MXNet src/operator/control_flow.cc (WhileLoopParam): subgraphs [cond, func]; func's variables read the op
    # inputs at func_input_locs, loop variable k being func variable func_var_locs[k]; func's heads are the
    # per-step outputs (num_out_data) then the new loop variables; cond's variables read op inputs
    # (cond_input_locs), the loop variables' current values. Outputs: the per-step outputs stacked to
    # max_iterations rows (rows after the loop stopped are zeros here; MXNet leaves them undefined), then the
    # final loop variables. ONNX Loop: the body computes func, then cond on the new loop variables.
    if len(node.subgraphs) != 2:
        raise BadInputFileError(f"node '{node.name}' (_while_loop) needs two subgraphs, the file gives "
                                f"{len(node.subgraphs)}")
    cond_graph, func_graph = node.subgraphs
    cond_locs, func_locs, var_locs = (_locs(node, k) for k in ("cond_input_locs", "func_input_locs", "func_var_locs"))
    n_out = node.attrs.optional_int("num_out_data", 0) or 0
    max_iter = node.attrs.required_int("max_iterations")
    func_vars = [n.index for n in func_graph.nodes if n.is_variable]
    cond_vars = [n.index for n in cond_graph.nodes if n.is_variable]
    n_loop = len(var_locs)
    if (len(func_vars) != len(func_locs) or len(cond_vars) != len(cond_locs)
            or len(func_graph.heads) != n_out + n_loop or len(cond_graph.heads) != 1):
        raise BadInputFileError(f"node '{node.name}' (_while_loop): its subgraphs do not fit its input locations")
    loop_inputs = [func_locs[v] for v in var_locs]  # op input index of each loop variable's initial value

    def condition(c: ConversionContext, current: dict[int, str], copy: str) -> str:
        bound = {v: current.get(k, inputs[k]) for v, k in zip(cond_vars, cond_locs, strict=True)}
        flag = translate_body(c, node, cond_graph, bound, copy)[0]
        return c.emit("Reshape", [c.as_bool(flag, f"{node.name}__cond"), c.i64([], f"{node.name}__scalar")], 1,
                      name=f"{node.name}__cond_scalar")[0]

    first = condition(ctx, {}, "")
    sub = _body_context(ctx)
    it = sub.fresh(f"{node.name}__iter")
    cond_in = sub.fresh(f"{node.name}__cond_in")
    body_inputs = [helper.make_tensor_value_info(it, TensorProto.INT64, []),
                   helper.make_tensor_value_info(cond_in, TensorProto.BOOL, [])]
    current: dict[int, str] = {}
    for k, op_index in enumerate(loop_inputs):
        t = ctx.type(inputs[op_index])
        name = sub.fresh(f"{node.name}__loop_var{k}")
        sub.types[name] = TensorType(t.elem, t.shape)
        body_inputs.append(helper.make_value_info(name, t.to_proto()))
        current[op_index] = name
    bound = {v: current.get(k, inputs[k]) for v, k in zip(func_vars, func_locs, strict=True)}
    heads = translate_body(sub, node, func_graph, bound)
    new_vars = heads[n_out:]
    cond_out = condition(sub, dict(zip(loop_inputs, new_vars, strict=True)), "__next")
    body_outs = [sub.emit("Identity", [h], 1, name=f"{node.name}__body_out")[0]
                 for h in [cond_out, *new_vars, *heads[:n_out]]]
    body = helper.make_graph(sub.nodes, f"{node.name}_body", body_inputs,
                             [helper.make_value_info(o, sub.type(o).to_proto()) for o in body_outs],
                             initializer=list(sub.initializers.values()))
    ctx.uses_contrib = ctx.uses_contrib or sub.uses_contrib
    total = n_out + n_loop
    names = [out(ctx, node, k, total) for k in range(total)]
    stacked = [ctx.fresh(f"{node.name}__stacked{k}") for k in range(n_out)]
    types = [TensorType(sub.type(o).elem, sub.type(o).shape) for o in body_outs[1:1 + n_loop]]
    for o in body_outs[1 + n_loop:]:
        step_shape = sub.type(o).shape
        types.append(TensorType(sub.type(o).elem, None if step_shape is None else (None, *step_shape)))
    trips = ctx.const(np.int64(max_iter), f"{node.name}__trips")
    ctx.emit("Loop", [trips, first, *[inputs[k] for k in loop_inputs]], [*names[n_out:], *stacked],
             name=node.name, out_types=types, body=body)
    for k, (s, name) in enumerate(zip(stacked, names[:n_out], strict=True)):  # pad the rows to max_iterations
        rank = len(types[n_loop + k].shape or ()) or ctx.rank(s, node.name)
        rows = ctx.emit("Shape", [s], 1, name=f"{node.name}__rows{k}", start=0, end=1)[0] if ctx.opset >= 15 else \
            ctx.emit("Slice", [ctx.emit("Shape", [s], 1, name=f"{node.name}__shape{k}")[0],
                               ctx.i64([0], f"{node.name}__s0"), ctx.i64([1], f"{node.name}__s1")], 1,
                     name=f"{node.name}__rows{k}")[0]
        missing = ctx.emit("Sub", [ctx.i64([max_iter], f"{node.name}__max{k}"), rows], 1, name=f"{node.name}__pad{k}")[0]
        pads = ctx.emit("Concat", [ctx.i64([0] * rank, f"{node.name}__pad_begin{k}"), missing,
                                   ctx.i64([0] * (rank - 1), f"{node.name}__pad_end{k}")], 1,
                        name=f"{node.name}__pads{k}", axis=0)[0]
        step_shape = types[n_loop + k].shape
        ctx.emit("Pad", [s, pads], [name], name=f"{node.name}__padded{k}",
                 out_types=[TensorType(types[n_loop + k].elem, None if step_shape is None
                                       else (max_iter, *step_shape[1:]))])
    return names
