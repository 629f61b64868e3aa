#!/usr/bin/env python3
"""Generate tern's wire code from calls.tbl.

    gen_wire.py codec    TABLE... OUT.h OUT.c [KINDS.h]  structs, encoders, decoders, names,
                                                 records; the handle kinds
    gen_wire.py dispatch TABLE OUT.h OUT.c       the executor's dispatch table
    gen_wire.py client   TABLE OUT.h OUT.c       the guest's call stubs
    gen_wire.py golden   TABLE OUT               the canonical layout, one call, record
                                                 or kind a line

A table is the single source of truth for ids and layouts; nothing generated
is committed. calls.tbl holds the CUDA calls; a table for another API
(opencl.tbl) starts with an `api` line naming it and the id range it owns.
The codec is one for every table (one id space, one set of kinds and record
names, checked disjoint); dispatch and client code are per table, typed
for its API (APIS below).
"""
import re
import sys

TYPES = {
    # name: (C type, encoder suffix)
    "u8": ("uint8_t", "u8"), "u16": ("uint16_t", "u16"), "u32": ("uint32_t", "u32"),
    "u64": ("uint64_t", "u64"), "i32": ("int32_t", "i32"), "i64": ("int64_t", "i64"),
    "f32": ("float", "f32"), "handle": ("uint64_t", "u64"), "dptr": ("uint64_t", "u64"),
    "str": (None, "str"), "blob": ("struct wire_blob", "blob"),
}


# Call properties, in brackets after the name:
#   sync   the call reports the errors of earlier deferred calls (the worker
#          answers it with the first one)
#   defer  the shim may send it without waiting for a reply (rpc_<call>_defer)
#   wait   the worker may answer it after requests that came later: its wait
#          runs off the dispatch thread, and the shim matches the reply
FLAGS = ("sync", "defer", "wait")


class Call:
    def __init__(self, ident, name, req, rep, retired=False, flags=()):
        self.id, self.name, self.req, self.rep, self.retired = ident, name, req, rep, retired
        self.flags = set(flags)


class Table:
    def __init__(self):
        self.calls, self.records, self.kinds = [], [], []
        self.api, self.first, self.last = "cuda", 1, 999


# What dispatch and client code is typed with, per API. ctx: the executor's
# state; status: the call's result type; lookup: the executor's handle lookup
# (status, entry) that the per-kind helpers wrap; fn: the dispatcher; rpc:
# the guest's round trip and deferral, which its library provides.
APIS = {
    "cuda": dict(ctx="struct exec", status="CUresult", include="<cuda.h>", guard="TERN_WIRE_DISPATCH_H",
                 fn="wire_dispatch", lookup="exec_handle_lookup", lookup_prefix="exec_lookup_",
                 invalid="CUDA_ERROR_INVALID_HANDLE", success="CUDA_SUCCESS", unknown="CUDA_ERROR_UNKNOWN",
                 rpc="rpc", client_guard="TERN_WIRE_CLIENT_H", dispatch_h="wire_dispatch.h",
                 client_h="wire_client.h", extra_include='#include "handle_table.h"'),
    "opencl": dict(ctx="struct cl_exec", status="cl_int", include="<CL/cl.h>", guard="TERN_WIRE_CL_DISPATCH_H",
                   fn="wire_cl_dispatch", lookup="cl_exec_handle_lookup", lookup_prefix="cl_exec_lookup_",
                   invalid="CL_INVALID_VALUE", success="CL_SUCCESS", unknown="CL_OUT_OF_RESOURCES",
                   rpc="cl_rpc", client_guard="TERN_WIRE_CL_CLIENT_H", dispatch_h="wire_cl_dispatch.h",
                   client_h="wire_cl_client.h", extra_include='#include "handle_table.h"'),
}


class Record:
    """A fixed-width layout of what a blob holds: one record, or an array of them."""
    def __init__(self, name, limit, fields):
        self.name, self.limit, self.fields = name, limit, fields
        self.size = sum(rec_field_size(f) for f in fields)


REC_SCALARS = {"u8": 1, "u16": 2, "u32": 4, "u64": 8, "i32": 4, "i64": 8, "f32": 4, "handle": 8, "dptr": 8}


def rec_field_size(f):
    t, _, count, _ = f
    return REC_SCALARS[t] * (count or 1)


def parse_record_fields(text, where):
    """`type name`, `type[N] name` (N elements), `type name=0` (must be zero)."""
    fields = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*([a-z0-9]+)(?:\[(\d+)\])?\s+([a-z_][a-z0-9_]*)(=0)?\s*", part)
        if not m or m.group(1) not in REC_SCALARS:
            sys.exit(f"{where}: bad record field '{part.strip()}'")
        fields.append((m.group(1), m.group(3), int(m.group(2)) if m.group(2) else 0, bool(m.group(4))))
    names = [f[1] for f in fields]
    if len(set(names)) != len(names):
        sys.exit(f"{where}: duplicate field name")
    return fields


def base(t):
    """A field's wire type: `handle:stream` is a handle."""
    return t.split(":", 1)[0]


def parse_fields(text, where, kinds=()):
    """`type name`; a handle may name its kind, `handle:stream name`, one the
    table declares above it (the handler's lookup is exec_lookup_<kind>)."""
    fields = []
    text = text.strip()
    if not text:
        return fields
    for part in text.split(","):
        bits = part.split()
        if len(bits) != 2 or base(bits[0]) not in TYPES or not re.fullmatch(r"[a-z_][a-z0-9_]*", bits[1]):
            sys.exit(f"{where}: bad field '{part.strip()}'")
        if ":" in bits[0] and (base(bits[0]) != "handle" or bits[0].split(":", 1)[1] not in kinds):
            sys.exit(f"{where}: '{bits[0]}': only a handle has a kind, one of the kind lines above")
        fields.append((bits[0], bits[1]))
    names = [f[1] for f in fields]
    if len(set(names)) != len(names):
        sys.exit(f"{where}: duplicate field name")
    return fields


def parse(path, known_kinds=()):
    """One table. @known_kinds: kinds of tables parsed before, which a typed
    handle may name too."""
    table = Table()
    calls, ids, names = table.calls, set(), set()
    rec_names = set()
    for lineno, line in enumerate(open(path), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{path}:{lineno}"
        m = re.fullmatch(r"api\s+([a-z]+)\s+(\d+)-(\d+)", line)
        if m:
            if calls or table.kinds or table.records or m.group(1) not in APIS:
                sys.exit(f"{where}: the api line comes first and names one of {', '.join(APIS)}")
            table.api, table.first, table.last = m.group(1), int(m.group(2)), int(m.group(3))
            continue
        m = re.fullmatch(r"kind\s+(\d+)\s+([a-z_][a-z0-9_]*)", line)
        if m:
            k = (int(m.group(1)), m.group(2))
            if not 0 < k[0] < 256 or k[0] in [x[0] for x in table.kinds] or k[1] in [x[1] for x in table.kinds]:
                sys.exit(f"{where}: kind {k[1]} ({k[0]}) reused or out of range")
            table.kinds.append(k)
            continue
        m = re.fullmatch(r"record\s+([a-z_][a-z0-9_]*)(?:\s+max\s+(\d+))?\s*:(.*)", line)
        if m:
            if m.group(1) in rec_names:
                sys.exit(f"{where}: record {m.group(1)} declared twice")
            rec_names.add(m.group(1))
            r = Record(m.group(1), int(m.group(2)) if m.group(2) else 0, parse_record_fields(m.group(3), where))
            table.records.append(r)
            continue
        m = re.fullmatch(r"(\d+)\s+retired\s+([a-z_][a-z0-9_]*)", line)
        if m:
            c = Call(int(m.group(1)), m.group(2), [], [], retired=True)
        else:
            m = re.fullmatch(r"(\d+)\s+([a-z_][a-z0-9_]*)(?:\s+\[([a-z ]*)\])?\s*(.*?)->(.*)", line)
            if not m:
                sys.exit(f"{where}: expected 'id name [flags] fields -> fields'")
            flags = (m.group(3) or "").split()
            if any(f not in FLAGS for f in flags):
                sys.exit(f"{where}: unknown flag in [{m.group(3)}]")
            kinds = [k[1] for k in table.kinds] + list(known_kinds)
            c = Call(int(m.group(1)), m.group(2), parse_fields(m.group(4), where, kinds),
                     parse_fields(m.group(5), where, kinds), flags=flags)
            if "defer" in c.flags and c.rep:
                sys.exit(f"{where}: a deferred call has no reply fields")
        if c.id < table.first or c.id > table.last or c.id in ids or c.name in names:
            sys.exit(f"{where}: id {c.id} or name {c.name} reused or out of range "
                     f"({table.first}-{table.last} for {table.api})")
        ids.add(c.id)
        names.add(c.name)
        calls.append(c)
    return table


def parse_all(paths):
    """Several tables as one codec sees them: ids, names, kinds and records
    may not meet across tables, and id ranges may not overlap."""
    merged, tables = Table(), []
    for path in paths:
        t = parse(path, [k[1] for k in merged.kinds])
        for o in tables:
            if t.first <= o.last and o.first <= t.last:
                sys.exit(f"{path}: id range {t.first}-{t.last} overlaps {o.api}'s")
        if {c.name for c in t.calls} & {c.name for c in merged.calls} or \
           {k[0] for k in t.kinds} & {k[0] for k in merged.kinds} or \
           {k[1] for k in t.kinds} & {k[1] for k in merged.kinds} or \
           {r.name for r in t.records} & {r.name for r in merged.records}:
            sys.exit(f"{path}: a call, kind or record of another table reused")
        tables.append(t)
        merged.calls += t.calls
        merged.kinds += t.kinds
        merged.records += t.records
    merged.tables = tables
    return merged


def live(calls):
    return [c for c in calls if not c.retired]


def struct_fields(fields):
    out = []
    for t, n in fields:
        if t == "str":
            out.append(f"\tchar {n}[WIRE_STR_MAX + 1];")
        else:
            out.append(f"\t{TYPES[base(t)][0]} {n};")
    if not out:
        out.append("\tuint8_t unused_;")
    return "\n".join(out)


def encoder(c, side, fields):
    lines = [f"void wire_{c.name}_{side}_encode(struct wire_msg *m, const struct wire_{c.name}_{side} *v)", "{"]
    for t, n in fields:
        if t == "str":
            lines.append(f"\twire_put_str(m, v->{n});")
        else:
            lines.append(f"\twire_put_{TYPES[base(t)][1]}(m, v->{n});")
    if not fields:
        lines.append("\t(void)m;\n\t(void)v;")
    lines.append("}")
    return "\n".join(lines)


def decoder(c, side, fields):
    lines = [f"int wire_{c.name}_{side}_decode(struct wire_cursor *cur, struct wire_{c.name}_{side} *v)", "{"]
    lines.append("\tmemset(v, 0, sizeof(*v));")
    for t, n in fields:
        if t == "str":
            lines.append(f"\tif (wire_get_str(cur, v->{n}, sizeof(v->{n})) < 0)\n\t\treturn -EPROTO;")
        else:
            lines.append(f"\tif (wire_get_{TYPES[base(t)][1]}(cur, &v->{n}) < 0)\n\t\treturn -EPROTO;")
    lines.append("\treturn wire_cursor_end(cur);")
    lines.append("}")
    return "\n".join(lines)


REC_C = {"u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t", "i32": "int32_t",
         "i64": "int64_t", "f32": "float", "handle": "uint64_t", "dptr": "uint64_t"}
REC_LE = {"u8": "8", "u16": "16", "u32": "32", "u64": "64", "i32": "32", "i64": "64", "f32": "32",
          "handle": "64", "dptr": "64"}


def record_header(r):
    up = r.name.upper()
    h = [f"#define WIRE_REC_{up}_BYTES {r.size}u"]
    if r.limit:
        h.append(f"#define WIRE_REC_{up}_MAX {r.limit}u")
    h.append(f"struct wire_rec_{r.name} {{")
    for t, n, count, _ in r.fields:
        h.append(f"\t{REC_C[t]} {n}{f'[{count}]' if count else ''};")
    h.append("};")
    h.append(f"void wire_rec_{r.name}_encode(const struct wire_rec_{r.name} *v, uint8_t out[WIRE_REC_{up}_BYTES]);")
    h.append(f"int wire_rec_{r.name}_decode(const void *p, size_t len, struct wire_rec_{r.name} *v);")
    h.append(f"int wire_rec_{r.name}_count(struct wire_blob b);")
    h.append(f"int wire_rec_{r.name}_get(struct wire_blob b, uint32_t i, struct wire_rec_{r.name} *v);")
    h.append(f"void wire_rec_{r.name}_put(uint8_t *buf, uint32_t i, const struct wire_rec_{r.name} *v);\n")
    return h


def record_scalar_put(t, dst, src):
    if t == "f32":
        return f"\t{{\n\t\tuint32_t u;\n\n\t\tmemcpy(&u, &{src}, 4);\n\t\tle32_put({dst}, u);\n\t}}"
    return f"\tle{REC_LE[t]}_put({dst}, (uint{REC_LE[t]}_t){src});"


def record_scalar_get(t, dst, src):
    if t == "f32":
        return f"\t{{\n\t\tuint32_t u = le32_get({src});\n\n\t\tmemcpy(&{dst}, &u, 4);\n\t}}"
    return f"\t{dst} = ({REC_C[t]})le{REC_LE[t]}_get({src});"


def record_code(r):
    up = r.name.upper()
    enc = [f"void wire_rec_{r.name}_encode(const struct wire_rec_{r.name} *v, uint8_t out[WIRE_REC_{up}_BYTES])", "{"]
    dec = [f"int wire_rec_{r.name}_decode(const void *p, size_t len, struct wire_rec_{r.name} *v)", "{",
           "\tconst uint8_t *in = p;", "",
           f"\tif (len != WIRE_REC_{up}_BYTES)", "\t\treturn -EPROTO;", "\tmemset(v, 0, sizeof(*v));"]
    off = 0
    for t, n, count, zero in r.fields:
        w = REC_SCALARS[t]
        if count:
            if t == "u8":
                enc.append(f"\tmemcpy(out + {off}, v->{n}, {count});")
                dec.append(f"\tmemcpy(v->{n}, in + {off}, {count});")
            else:
                enc.append(f"\tfor (int k = 0; k < {count}; k++)")
                enc.append("\t" + record_scalar_put(t, f"out + {off} + {w} * k", f"v->{n}[k]"))
                dec.append(f"\tfor (int k = 0; k < {count}; k++)")
                dec.append("\t" + record_scalar_get(t, f"v->{n}[k]", f"in + {off} + {w} * k"))
            if zero:
                dec.append(f"\tfor (int k = 0; k < {count}; k++)\n\t\tif (v->{n}[k])\n\t\t\treturn -EPROTO;")
        else:
            enc.append(record_scalar_put(t, f"out + {off}", f"v->{n}"))
            dec.append(record_scalar_get(t, f"v->{n}", f"in + {off}"))
            if zero:
                dec.append(f"\tif (v->{n})\n\t\treturn -EPROTO;")
        off += rec_field_size((t, n, count, zero))
    enc.append("}")
    dec += ["\treturn 0;", "}"]
    cnt = [f"int wire_rec_{r.name}_count(struct wire_blob b)", "{",
           f"\tif (b.len % WIRE_REC_{up}_BYTES)", "\t\treturn -EPROTO;"]
    if r.limit:
        cnt += [f"\tif (b.len / WIRE_REC_{up}_BYTES > WIRE_REC_{up}_MAX)", "\t\treturn -EPROTO;"]
    else:
        cnt += [f"\tif (b.len / WIRE_REC_{up}_BYTES > INT32_MAX)", "\t\treturn -EPROTO;"]
    cnt += [f"\treturn (int)(b.len / WIRE_REC_{up}_BYTES);", "}"]
    get = [f"int wire_rec_{r.name}_get(struct wire_blob b, uint32_t i, struct wire_rec_{r.name} *v)", "{",
           f"\tif (i >= b.len / WIRE_REC_{up}_BYTES)", "\t\treturn -EPROTO;",
           f"\treturn wire_rec_{r.name}_decode(b.ptr + (size_t)i * WIRE_REC_{up}_BYTES, WIRE_REC_{up}_BYTES, v);", "}"]
    put = [f"void wire_rec_{r.name}_put(uint8_t *buf, uint32_t i, const struct wire_rec_{r.name} *v)", "{",
           f"\twire_rec_{r.name}_encode(v, buf + (size_t)i * WIRE_REC_{up}_BYTES);", "}"]
    return "\n".join(enc) + "\n\n" + "\n".join(dec) + "\n\n" + "\n".join(cnt) + "\n\n" + \
        "\n".join(get) + "\n\n" + "\n".join(put) + "\n"


def record_check(records):
    """wire_record_check(): for fuzzing, decode a blob of records and encode it back."""
    c = ["int wire_record_check(uint32_t which, const void *p, size_t len)", "{",
         "\tstruct wire_blob b = { p, (uint32_t)len };", "\tuint8_t back[WIRE_REC_BYTES_MAX];",
         "\tint n;", "",
         "\tif (len > UINT32_MAX)", "\t\treturn -EPROTO;", "\tswitch (which) {"]
    for i, r in enumerate(records):
        up = r.name.upper()
        c += [f"\tcase {i}: {{", f"\t\tstruct wire_rec_{r.name} v;", "",
              f"\t\tn = wire_rec_{r.name}_count(b);", "\t\tfor (int k = 0; k < n; k++) {",
              f"\t\t\tif (wire_rec_{r.name}_get(b, (uint32_t)k, &v) < 0)", "\t\t\t\treturn -EPROTO;",
              f"\t\t\twire_rec_{r.name}_encode(&v, back);",
              f"\t\t\tif (memcmp(back, b.ptr + (size_t)k * WIRE_REC_{up}_BYTES, WIRE_REC_{up}_BYTES))",
              "\t\t\t\treturn -EILSEQ;", "\t\t}", "\t\treturn n < 0 ? n : 0;", "\t}"]
    c += ["\tdefault:", "\t\treturn -ENOSYS;", "\t}", "}"]
    return "\n".join(c) + "\n"


def gen_kinds(table, out_h):
    h = ["/* Generated by gen_wire.py from calls.tbl: do not edit.",
         " *",
         " * The kinds of virtual handles (calls.tbl, \"kind\" lines): the top byte",
         " * of every handle the guest holds (WIRE_HANDLE_KIND_SHIFT, wire.h). */",
         "#ifndef TERN_WIRE_KINDS_H", "#define TERN_WIRE_KINDS_H", "", "enum wire_handle_kind {"]
    for ident, name in table.kinds:
        h.append(f"\tWIRE_HANDLE_{name.upper()} = {ident},")
    h.append(f"\tWIRE_HANDLE_KIND_MAX = {max(k[0] for k in table.kinds) + 1},")
    h += ["};", "", "/* The same list for declarations that follow it: X(id, NAME) per kind. */",
          "#define WIRE_HANDLE_KIND_LIST(X) \\"]
    h += [f"\tX({ident}, {name.upper()}) \\" for ident, name in table.kinds]
    h += ["", "#endif"]
    open(out_h, "w").write("\n".join(h) + "\n")


def gen_codec(table, out_h, out_c):
    calls, records = table.calls, table.records
    h = ["/* Generated by gen_wire.py from calls.tbl: do not edit. */",
         "#ifndef TERN_WIRE_CALLS_H", "#define TERN_WIRE_CALLS_H", "",
         "#include <stdbool.h>", "", '#include "wire.h"', "", "enum wire_call_id {"]
    for c in calls:
        h.append(f"\tWIRE_CALL_{c.name.upper()} = {c.id},{'  /* retired */' if c.retired else ''}")
    h.append("};\n")
    h.append(f"#define WIRE_CALL_ID_MAX {max(c.id for c in calls)}\n")
    h.append("/* The id range each API's table owns (its `api` line): the worker routes a")
    h.append(" * request to that API's executor by it. */")
    for t in getattr(table, "tables", [table]):
        h.append(f"#define WIRE_API_{t.api.upper()}_FIRST {t.first}u")
        h.append(f"#define WIRE_API_{t.api.upper()}_LAST {t.last}u")
    h.append("")
    h.append("/* Records: the layouts of what blobs hold (calls.tbl, \"records\"). encode")
    h.append(" * writes one record's BYTES; decode reads one, -EPROTO unless @len is exactly")
    h.append(" * BYTES or a must-be-zero field is not; count is the number of records in a")
    h.append(" * blob of them, -EPROTO for a length that is no multiple of BYTES or a count")
    h.append(" * over MAX; get decodes record @i of a blob (bounds checked), put encodes")
    h.append(" * record @i into a buffer the caller sized. Pure functions, any thread. */")
    for r in records:
        h += record_header(r)
    h.append(f"#define WIRE_REC_BYTES_MAX {max([r.size for r in records] + [1])}u")
    h.append(f"#define WIRE_REC_COUNT {len(records)}u")
    h.append("/* Decode the blob @p as records of kind @which (table order), encode each")
    h.append(" * back and compare: 0, -EPROTO, -EILSEQ (a record with two encodings), or")
    h.append(" * -ENOSYS for @which >= WIRE_REC_COUNT. For tests and fuzzing. */")
    h.append("int wire_record_check(uint32_t which, const void *p, size_t len);\n")
    for c in live(calls):
        for side, fields in (("req", c.req), ("rep", c.rep)):
            h.append(f"struct wire_{c.name}_{side} {{\n{struct_fields(fields)}\n}};")
            h.append(f"void wire_{c.name}_{side}_encode(struct wire_msg *m, const struct wire_{c.name}_{side} *v);")
            h.append(f"int wire_{c.name}_{side}_decode(struct wire_cursor *cur, struct wire_{c.name}_{side} *v);\n")
    h.append("/* Decode a request (or reply fields, after the status) of call @id and")
    h.append(" * discard it: 0, -EPROTO, or -ENOSYS for an unknown id. For tests and fuzzing. */")
    h.append("int wire_request_check(uint32_t id, const void *payload, size_t len);")
    h.append("int wire_reply_check(uint32_t id, const void *payload, size_t len);\n")
    h.append("/* The table's properties of call @id (false for an unknown id): whether it")
    h.append(" * reports the errors of earlier deferred calls, and whether the shim may")
    h.append(" * send it without waiting for its reply, and whether the worker may answer")
    h.append(" * it after requests that came later (its wait runs aside). */")
    h.append("bool wire_call_synchronises(uint32_t id);")
    h.append("bool wire_call_deferrable(uint32_t id);")
    h.append("bool wire_call_waits(uint32_t id);\n")
    h.append("/* The call's name (\"mem_alloc\"), or NULL for an id never defined or retired. */")
    h.append("const char *wire_call_name(uint32_t id);")
    h.append("/* The kind's name (\"stream\"), or NULL for a kind the table does not declare. */")
    h.append("const char *wire_handle_kind_name(uint32_t kind);\n")
    h.append("#endif")
    c_ = ["/* Generated by gen_wire.py from calls.tbl: do not edit. */",
          "#include <errno.h>", "#include <stdlib.h>", "#include <string.h>", '#include "wire_calls.h"', ""]
    for r in records:
        c_.append(record_code(r))
    c_.append(record_check(records))
    for c in live(calls):
        for side, fields in (("req", c.req), ("rep", c.rep)):
            c_.append(encoder(c, side, fields) + "\n")
            c_.append(decoder(c, side, fields) + "\n")
    for side in ("req", "rep"):
        fn = "request" if side == "req" else "reply"
        c_.append(f"int wire_{fn}_check(uint32_t id, const void *payload, size_t len)\n{{")
        c_.append("\tstruct wire_cursor cur;\n\tvoid *v;\n\tint ret;\n")
        c_.append("\twire_cursor_init(&cur, payload, len);\n\tswitch (id) {")
        for c in live(calls):
            c_.append(f"\tcase {c.id}:\n\t\tv = malloc(sizeof(struct wire_{c.name}_{side}));")
            c_.append(f"\t\tret = v ? wire_{c.name}_{side}_decode(&cur, v) : -ENOMEM;\n\t\tfree(v);\n\t\treturn ret;")
        c_.append("\tdefault:\n\t\treturn -ENOSYS;\n\t}\n}\n")
    for fn, flag in (("wire_call_synchronises", "sync"), ("wire_call_deferrable", "defer"),
                     ("wire_call_waits", "wait")):
        c_.append(f"bool {fn}(uint32_t id)\n{{\n\tswitch (id) {{")
        for c in live(calls):
            if flag in c.flags:
                c_.append(f"\tcase WIRE_CALL_{c.name.upper()}:")
        c_.append("\t\treturn true;\n\tdefault:\n\t\treturn false;\n\t}\n}\n")
    c_.append("const char *wire_call_name(uint32_t id)\n{\n\tswitch (id) {")
    for c in live(calls):
        c_.append(f"\tcase {c.id}: return \"{c.name}\";")
    c_.append("\tdefault: return NULL;\n\t}\n}\n")
    c_.append("const char *wire_handle_kind_name(uint32_t kind)\n{\n\tswitch (kind) {")
    for ident, name in table.kinds:
        c_.append(f"\tcase {ident}: return \"{name}\";")
    c_.append("\tdefault: return NULL;\n\t}\n}")
    open(out_h, "w").write("\n".join(h) + "\n")
    open(out_c, "w").write("\n".join(c_) + "\n")


def gen_dispatch(table, out_h, out_c):
    calls, api = table.calls, APIS[table.api]
    st, ctx = api["status"], api["ctx"]
    h = [f"/* Generated by gen_wire.py from the {table.api} table: do not edit.",
         " *",
         " * The executor implements one exec_<call>() per remoted call. Each gets",
         " * the decoded request and fills the reply; its return value is the",
         f" * {st} sent back. Requests are decoded with bounds checks before the",
         " * handler runs; the handler validates handles, pointers and sizes. */",
         f"#ifndef {api['guard']}", f"#define {api['guard']}", "",
         f"#include {api['include']}", api["extra_include"], '#include "wire_calls.h"', "",
         f"{ctx};", ""]
    h += [f"/* The entry of @handle if it is a live handle of @kind: {api['success']} with",
          f" * *@e set, or {api['invalid']} (OpenCL: the kind's own CL_INVALID_<OBJECT>) with *@e NULL. */",
          f"{st} {api['lookup']}({ctx} *ex, uint64_t handle, enum handle_kind kind,",
          "\t\t\t    struct handle_entry **e);", "",
          "/* One per kind line of the table, for the request fields typed", " * `handle:<kind>`. */"]
    for _, name in table.kinds:
        h += [f"static inline {st} {api['lookup_prefix']}{name}({ctx} *ex, uint64_t handle, struct handle_entry **e)",
              "{", f"\treturn {api['lookup']}(ex, handle, HANDLE_{name.upper()}, e);", "}", ""]
    for c in live(calls):
        h.append(f"{st} exec_{c.name}({ctx} *ex, const struct wire_{c.name}_req *req, struct wire_{c.name}_rep *rep);")
    h += ["",
          "/* Decode the payload of call @id, run its handler and encode the reply",
          " * (status first) into @reply. Returns 0, or -ENOSYS for an unknown id and",
          " * -EPROTO for a payload that does not decode; the caller then sends an",
          " * error reply. The reply may reference memory owned by @ex (blobs) until",
          " * the next dispatch. */",
          f"int {api['fn']}({ctx} *ex, uint32_t id, struct wire_cursor *payload, struct wire_msg *reply);",
          "", "#endif"]
    c_ = [f"/* Generated by gen_wire.py from the {table.api} table: do not edit. */",
          "#include <errno.h>", "#include <stdlib.h>", f'#include "{api["dispatch_h"]}"', ""]
    for c in live(calls):
        c_ += [f"static int dispatch_{c.name}({ctx} *ex, struct wire_cursor *cur, struct wire_msg *reply)",
               "{",
               f"\tstruct wire_{c.name}_req *req = calloc(1, sizeof(*req));",
               f"\tstruct wire_{c.name}_rep *rep = calloc(1, sizeof(*rep));",
               "\tint ret = -ENOMEM;", "",
               "\tif (!req || !rep)\n\t\tgoto out;",
               f"\tret = wire_{c.name}_req_decode(cur, req);",
               "\tif (ret < 0)\n\t\tgoto out;",
               f"\twire_put_u32(reply, (uint32_t)exec_{c.name}(ex, req, rep));",
               f"\twire_{c.name}_rep_encode(reply, rep);",
               "out:", "\tfree(req);", "\tfree(rep);", "\treturn ret;", "}", ""]
    c_.append(f"int {api['fn']}({ctx} *ex, uint32_t id, struct wire_cursor *payload, struct wire_msg *reply)\n{{\n\tswitch (id) {{")
    for c in live(calls):
        c_.append(f"\tcase {c.id}: return dispatch_{c.name}(ex, payload, reply);")
    c_.append("\tdefault: return -ENOSYS;\n\t}\n}")
    open(out_h, "w").write("\n".join(h) + "\n")
    open(out_c, "w").write("\n".join(c_) + "\n")


def gen_client(table, out_h, out_c):
    calls, api = table.calls, APIS[table.api]
    st, rpc = api["status"], api["rpc"]
    h = [f"/* Generated by gen_wire.py from the {table.api} table: do not edit.",
         " *",
         " * One stub per remoted call: encode the request, send it through the",
         f" * guest's connection, decode the reply. The return value is the call's",
         f" * {st}, or the error of the transport ({rpc}_call()). On any error the",
         " * reply struct holds zeros, never stale data. */",
         f"#ifndef {api['client_guard']}", f"#define {api['client_guard']}", "",
         f"#include {api['include']}", '#include "wire_calls.h"', "",
         "/* Provided by the guest library: one round trip. @req holds the encoded request",
         " * payload; on success *@rep is positioned at the reply's fields (after",
         " * the status, which is returned) and stays valid until the calling",
         f" * thread's next {rpc}_call(). */",
         f"{st} {rpc}_call(uint32_t id, struct wire_msg *req, struct wire_cursor *rep);",
         "/* Provided by the guest library: queue a request that wants no reply (lazy RPC).",
         " * Returns an error only when the session is gone; the call's own error",
         " * surfaces at the next synchronising call. */",
         f"{st} {rpc}_defer(uint32_t id, struct wire_msg *req);", ""]
    for c in live(calls):
        h.append(f"{st} rpc_{c.name}(const struct wire_{c.name}_req *req, struct wire_{c.name}_rep *rep);")
        if "defer" in c.flags:
            h.append(f"{st} rpc_{c.name}_defer(const struct wire_{c.name}_req *req);")
    h += ["", "#endif"]
    c_ = [f"/* Generated by gen_wire.py from the {table.api} table: do not edit. */",
          "#include <string.h>", f'#include "{api["client_h"]}"', ""]
    for c in live(calls):
        c_ += [f"{st} rpc_{c.name}(const struct wire_{c.name}_req *req, struct wire_{c.name}_rep *rep)",
               "{",
               "\tstruct wire_msg m;", "\tstruct wire_cursor cur;", f"\t{st} res;", "",
               "\twire_msg_init(&m);",
               f"\twire_{c.name}_req_encode(&m, req);",
               f"\tres = {rpc}_call(WIRE_CALL_{c.name.upper()}, &m, &cur);",
               "\twire_msg_release(&m);",
               f"\tif (res != {api['success']} || wire_{c.name}_rep_decode(&cur, rep) < 0) {{",
               "\t\tmemset(rep, 0, sizeof(*rep));",
               f"\t\treturn res != {api['success']} ? res : {api['unknown']};",
               "\t}",
               f"\treturn {api['success']};", "}", ""]
        if "defer" in c.flags:
            c_ += [f"{st} rpc_{c.name}_defer(const struct wire_{c.name}_req *req)",
                   "{",
                   "\tstruct wire_msg m;", f"\t{st} res;", "",
                   "\twire_msg_init(&m);",
                   f"\twire_{c.name}_req_encode(&m, req);",
                   f"\tres = {rpc}_defer(WIRE_CALL_{c.name.upper()}, &m);",
                   "\twire_msg_release(&m);",
                   "\treturn res;", "}", ""]
    open(out_h, "w").write("\n".join(h) + "\n")
    open(out_c, "w").write("\n".join(c_) + "\n")


def golden_lines(table):
    out = []
    for c in table.calls:
        if c.retired:
            out.append(f"{c.id} retired {c.name}")
        else:
            req = ", ".join(t for t, _ in c.req)
            rep = ", ".join(t for t, _ in c.rep)  # a typed handle as handle:<kind>
            flags = f" [{' '.join(f for f in FLAGS if f in c.flags)}]" if c.flags else ""
            out.append(f"{c.id} {c.name}{flags} ({req}) -> ({rep})")
    for ident, name in table.kinds:
        out.append(f"kind {ident} {name}")
    for r in table.records:
        fields = ", ".join(f"{t}{f'[{count}]' if count else ''}{'=0' if zero else ''}" for t, _, count, zero in r.fields)
        out.append(f"record {r.name} ({fields}) {r.size} bytes{f' max {r.limit}' if r.limit else ''}")
    return out


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    mode = sys.argv[1]
    tables = [a for a in sys.argv[2:] if a.endswith(".tbl")]
    outs = [a for a in sys.argv[2:] if not a.endswith(".tbl")]
    if not tables or (mode != "codec" and len(tables) != 1):
        sys.exit(__doc__)
    # Every table is parsed together, so that one never reuses another's
    # ids, kinds or names; dispatch, client and golden use the first.
    parsed = parse_all(tables)
    one = parsed.tables[0]
    if mode == "codec":
        gen_codec(parsed, outs[0], outs[1])
        if len(outs) > 2:
            gen_kinds(parsed, outs[2])
    elif mode == "dispatch":
        gen_dispatch(one, outs[0], outs[1])
    elif mode == "client":
        gen_client(one, outs[0], outs[1])
    elif mode == "golden":
        open(outs[0], "w").write("\n".join(golden_lines(one)) + "\n")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
