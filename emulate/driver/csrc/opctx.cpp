// Op context at C++ speed: a global RecordFunction callback (the hook torch's own profiler uses) tells the emulated
// driver which aten op each device call belongs to, with the op's input shapes, dtypes and scalar arguments.
// Built on first use against torch's headers (emulate/driver/build.py); emulate/capture.py falls back to a Python
// TorchDispatchMode when no C++ compiler is available. The driver's stepcast_* functions are resolved at load
// time from the driver, which the capture layer loads RTLD_GLOBAL first.
#include <ATen/record_function.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/from_blob.h>
#include <unordered_set>
#include <algorithm>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

extern "C" {
void stepcast_set_op(int op);
void stepcast_pause(void);
void stepcast_resume(void);
int stepcast_needs_untrack(void);
int stepcast_range_known(unsigned long long ptr, unsigned long long bytes, unsigned long long limit);
unsigned long long stepcast_real_limit(void);
int stepcast_has_ranges(void);
void stepcast_range_written(unsigned long long ptr, unsigned long long bytes);
void stepcast_untrack(unsigned long long ptr, unsigned long long bytes);
void stepcast_answer_readback(int active, long long value);
void stepcast_host_work(int node);
void stepcast_count_python(void);
}

namespace {

// the op's overload ("Tensor", "out"...): through operator_name(), since RecordFunction::overload_name() is newer
// than torch 2.6
std::string overload_of(const at::RecordFunction &fn) {
    const auto name = fn.operator_name();
    return name ? name->overload_name : std::string();
}

std::mutex table_lock;
std::unordered_map<uint64_t, int> ids;
std::vector<std::string> table;  // JSON object per op id
thread_local std::vector<int> stack;
thread_local bool replaying = false;

// Ops that move or combine small metadata (object collectives, bucket indices, sizes, a router's token counts):
// when every tensor they read holds real bytes (datapath.c), they are run for real on the CPU over the device memory
// itself (it is host-addressable under emulation), so their outputs hold real bytes too. This is how data-dependent
// values follow their sources (emulate/stated_routing.py: a MoE router's expert ids -> the routing map -> tokens per
// expert -> all-to-all split sizes and grouped-GEMM offsets).
const std::unordered_set<std::string> replayable = {
    "aten::cat", "aten::stack", "aten::copy_", "aten::clone", "aten::index_select", "aten::cumsum", "aten::sum",
    "aten::add", "aten::sub", "aten::mul", "aten::div", "aten::max", "aten::eq", "aten::ne", "aten::narrow_copy",
    "aten::contiguous", "aten::view_as_real", "aten::add_", "aten::mul_", "aten::div_", "aten::sub_",
    "aten::fill_", "aten::zero_", "aten::scatter", "aten::scatter_", "aten::scatter_add", "aten::scatter_add_",
    "aten::_to_copy", "aten::histc", "aten::bincount", "aten::one_hot", "aten::gt", "aten::ge", "aten::lt",
    "aten::le", "aten::min", "aten::argsort", "aten::sort", "aten::gather"};
// Of those, the ops that only write their first argument: its old bytes need not be known. They are replayed only
// up to replay_limit (a fill of a large buffer is no metadata, and writing it would make the whole of it resident
// in host memory).
const std::unordered_set<std::string> overwrite_first = {"aten::copy_", "aten::fill_", "aten::zero_"};

// The stated routing (emulate/stated_routing.py): called with a router top-k's expert-id output (int64, tokens x k,
// contiguous), the tokens, the experts it chose from and k; it writes the ids and answers 1 (0: left as it was).
using RouteFn = int (*)(unsigned long long ids, long long tokens, long long experts, long long k);
RouteFn route = nullptr;
// a top-k over more candidates than this is no router (a vocabulary's top-k when sampling, say)
constexpr int64_t MAX_ROUTED_EXPERTS = 4096;

uint64_t span_bytes(const at::Tensor &t) {
    if (t.numel() == 0) return 0;
    int64_t last = 0;
    for (int64_t i = 0; i < t.dim(); i++) last += (t.sizes()[i] - 1) * t.strides()[i];
    return (uint64_t)(last + 1) * t.element_size();
}

// The device address of a CUDA tensor with memory behind it; null for tensors that have none to point at: the
// fake tensors torch.compile traces with (a CUDA device, no storage), functional wrappers, not-yet-allocated data.
// Only the const accessors are used, inside the try: the mutable ones (data_ptr()) throw or warn on fake and
// functional tensors, and every throw in a callback is printed by RecordFunction.
const void *device_data(const at::Tensor &t) {
    try {
        if (!t.defined() || !t.is_cuda() || !t.has_storage() || !t.unsafeGetTensorImpl()->unsafe_storage().data())
            return nullptr;
        return t.const_data_ptr();
    } catch (const c10::Error &) {
        return nullptr;
    }
}

// Integer and boolean tensors are the metadata the replay carries (expert ids, routing maps, counts, offsets): they
// are followed up to this size even past STEPCAST_REAL_BYTES (a routing map is tokens x experts bytes: 16384 tokens
// of a 256-expert router make 4 MiB); floating tensors only up to it.
constexpr uint64_t METADATA_BYTES = 64ull << 20;
uint64_t replay_limit(const at::Tensor &t) {
    bool metadata = c10::isIntegralType(t.scalar_type(), /*includeBool=*/true);
    uint64_t real = stepcast_real_limit();  // STEPCAST_REAL_BYTES, as the driver reads it
    return metadata ? std::max(real, METADATA_BYTES) : real;
}

bool known(const at::Tensor &t) {  // host tensors (wrapped scalars, CPU operands) hold real bytes anyway
    if (!t.defined() || t.device().is_cpu()) return t.defined();
    const void *p = device_data(t);
    return p && (t.numel() == 0 || stepcast_range_known((uintptr_t)p, span_bytes(t), replay_limit(t)));
}

// A CPU tensor over a device tensor's own memory (host-addressable under emulation); undefined when it has none.
at::Tensor host_view(const at::Tensor &t) {
    if (t.device().is_cpu()) return t;
    const void *p = device_data(t);
    if (!p) return at::Tensor();
    return at::from_blob(const_cast<void *>(p), t.sizes(), t.strides(), at::TensorOptions().dtype(t.dtype()));
}

// Inputs are only readable in the start callback: replayable ops keep them for the end callback. An op whose
// output size a kernel computes (sized) is replayed on the host at its start instead, its result kept here.
struct SavedInputs : at::ObserverContext {
    std::vector<c10::IValue> inputs;
    at::Tensor result;
};

// Ops whose output's size is data: a kernel counts it and the host reads the count back before allocating the
// output (a MoE dispatcher's masked_select of a routing map: nonzero). With real inputs they are run on the host
// when they start, the count answers the op's read-back (memory.c stepcast_answer_readback), and the result fills
// the output at their end.
const std::unordered_set<std::string> sized = {"aten::nonzero"};

// The host result of a sized op whose input holds real bytes; undefined otherwise.
at::Tensor replay_sized(const at::RecordFunction &fn) {
    if (fn.inputs().empty() || !fn.inputs()[0].isTensor()) return at::Tensor();
    const at::Tensor &input = fn.inputs()[0].toTensor();
    if (!input.defined() || input.numel() == 0 || !known(input)) return at::Tensor();
    at::Tensor view = host_view(input);
    if (!view.defined()) return at::Tensor();
    try {
        replaying = true;
        at::Tensor result = view.nonzero();
        replaying = false;
        return result;
    } catch (const std::exception &) {
        replaying = false;
        return at::Tensor();
    }
}

bool replay_on_host(const at::RecordFunction &fn, const SavedInputs *saved) {
    if (!saved) return false;
    std::vector<c10::IValue> args;
    bool overwrites_self = overwrite_first.count(fn.name()) > 0;  // copy_ reads only its source, a fill nothing
    for (const auto &v : saved->inputs) {
        if (v.isTensor()) {
            bool written_only = overwrites_self && args.empty();
            if (written_only && span_bytes(v.toTensor()) > replay_limit(v.toTensor())) return false;
            if (!written_only && !known(v.toTensor())) return false;
            at::Tensor view = host_view(v.toTensor());
            if (!view.defined()) return false;
            args.emplace_back(view);
        } else if (v.isTensorList()) {
            std::vector<at::Tensor> list;
            for (const at::Tensor &t : v.toTensorVector()) {
                if (!known(t)) return false;
                list.push_back(host_view(t));
            }
            args.emplace_back(list);
        } else if (v.isDevice()) {
            return false;
        } else {
            args.push_back(v);
        }
    }
    std::vector<at::Tensor> outs;
    for (const auto &v : fn.outputs()) {
        if (!v.isTensor() || !device_data(v.toTensor())) return false;
        outs.push_back(v.toTensor());
    }
    try {
        replaying = true;
        auto op = c10::Dispatcher::singleton().findSchemaOrThrow(fn.name(), overload_of(fn).c_str());
        op.callBoxed(&args);
        for (size_t i = 0; i < outs.size() && i < args.size(); i++) {
            if (!args[i].isTensor()) continue;
            const at::Tensor &result = args[i].toTensor();
            const void *out = device_data(outs[i]);
            if (result.const_data_ptr() != out) host_view(outs[i]).copy_(result);
            stepcast_range_written((uintptr_t)out, span_bytes(outs[i]));
        }
        replaying = false;
        return true;
    } catch (const std::exception &) {
        replaying = false;
        return false;
    }
}
// A router's top-k (``torch.topk`` over the last dimension of floating scores, k < candidates <= MAX_ROUTED_EXPERTS,
// int64 ids): its ids are the stated routing's (the scores a kernel computed read as zeros, so the real top-k would
// give every token the same experts). Returns whether the ids were written.
bool route_topk(const at::RecordFunction &fn, const SavedInputs *saved) {
    if (!route || !saved || saved->inputs.size() < 3 || fn.outputs().size() < 2) return false;
    const auto &in = saved->inputs;
    if (!in[0].isTensor() || !in[1].isInt() || !in[2].isInt() || !fn.outputs()[1].isTensor()) return false;
    const at::Tensor &scores = in[0].toTensor();
    const at::Tensor &ids = fn.outputs()[1].toTensor();
    if (!scores.defined() || !scores.is_floating_point() || scores.dim() < 1 || !ids.defined()) return false;
    int64_t dim = in[2].toInt(), k = in[1].toInt(), experts = scores.size(-1);
    if (dim < 0) dim += scores.dim();
    if (dim != scores.dim() - 1 || k < 1 || k >= experts || experts > MAX_ROUTED_EXPERTS) return false;
    if (ids.scalar_type() != c10::ScalarType::Long || !ids.is_contiguous() || ids.numel() == 0) return false;
    const void *p = device_data(ids);
    if (!p || !route((unsigned long long)(uintptr_t)p, ids.numel() / k, experts, k)) return false;
    stepcast_range_written((uintptr_t)p, span_bytes(ids));
    return true;
}

// Tensor arguments whose values decide a kernel's work, recorded in the op table when they hold real bytes: a
// grouped GEMM's group offsets (the cumulative tokens per expert), so its groups' sizes are known to the estimator.
const std::unordered_map<std::string, size_t> value_arguments = {{"aten::_grouped_mm", 2},
                                                                 {"aten::_scaled_grouped_mm", 4}};
constexpr int64_t MAX_RECORDED_VALUES = 4096;

// A value argument of ``fn`` that holds real bytes: its input index and its values (index SIZE_MAX, no values, for
// any other op or input). Looked up once per op: key_of and describe run for every op.
struct RecordedValues {
    size_t index = SIZE_MAX;
    std::vector<int64_t> values;
};
RecordedValues recorded_values(const at::RecordFunction &fn) {
    auto it = value_arguments.find(fn.name());
    if (it == value_arguments.end() || it->second >= fn.inputs().size()) return {};
    const auto &v = fn.inputs()[it->second];
    if (!v.isTensor()) return {};
    const at::Tensor &t = v.toTensor();
    if (!t.defined() || t.dim() != 1 || t.numel() > MAX_RECORDED_VALUES || !known(t)) return {};
    const void *p = device_data(t);  // read in place (no torch op here: it would enter this hook again)
    if (!p) return {};
    RecordedValues out{it->second, std::vector<int64_t>((size_t)t.numel())};
    int64_t stride = t.strides()[0];
    for (int64_t j = 0; j < t.numel(); j++) {
        if (t.scalar_type() == c10::ScalarType::Int) out.values[j] = static_cast<const int32_t *>(p)[j * stride];
        else if (t.scalar_type() == c10::ScalarType::Long) out.values[j] = static_cast<const int64_t *>(p)[j * stride];
        else return {};
    }
    return out;
}

// A sized op's end: its output (sized by the answered count) gets the host result. Returns whether it did.
bool fill_sized(const at::RecordFunction &fn, const at::Tensor &result) {
    stepcast_answer_readback(0, 0);
    if (fn.outputs().empty() || !fn.outputs()[0].isTensor()) return false;
    const at::Tensor &out = fn.outputs()[0].toTensor();
    const void *p = device_data(out);
    if (!p || out.sizes() != result.sizes() || out.scalar_type() != result.scalar_type()) return false;
    try {
        replaying = true;
        host_view(out).copy_(result);
        replaying = false;
    } catch (const std::exception &) {
        replaying = false;
        return false;
    }
    stepcast_range_written((uintptr_t)p, span_bytes(out));
    return true;
}

at::CallbackHandle handle = 0;

inline uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }

const char *dtype_name(c10::ScalarType t) {
    switch (t) {
    case c10::ScalarType::Float: return "torch.float32";
    case c10::ScalarType::Half: return "torch.float16";
    case c10::ScalarType::BFloat16: return "torch.bfloat16";
    case c10::ScalarType::Double: return "torch.float64";
    case c10::ScalarType::Long: return "torch.int64";
    case c10::ScalarType::Int: return "torch.int32";
    case c10::ScalarType::Short: return "torch.int16";
    case c10::ScalarType::Char: return "torch.int8";
    case c10::ScalarType::Byte: return "torch.uint8";
    case c10::ScalarType::Bool: return "torch.bool";
    case c10::ScalarType::Float8_e4m3fn: return "torch.float8_e4m3fn";
    case c10::ScalarType::Float8_e5m2: return "torch.float8_e5m2";
    case c10::ScalarType::ComplexHalf: return "torch.complex32";
    case c10::ScalarType::ComplexFloat: return "torch.complex64";
    case c10::ScalarType::ComplexDouble: return "torch.complex128";
    default: return "torch.other";
    }
}

uint64_t hash_tensor(uint64_t h, const at::Tensor &t) {
    if (!t.defined()) return mix(h, 0x7e57);
    for (auto s : t.sizes()) h = mix(h, (uint64_t)s);
    return mix(mix(h, (uint64_t)t.dim() + 1000), (uint64_t)t.scalar_type());
}

uint64_t key_of(const at::RecordFunction &fn) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = fn.name(); *p; p++) h = mix(h, (unsigned char)*p);
    RecordedValues recorded = recorded_values(fn);
    size_t index = 0;
    for (const auto &v : fn.inputs()) {
        if (index++ == recorded.index)
            for (int64_t x : recorded.values) h = mix(mix(h, 8), (uint64_t)x);
        if (v.isTensor()) h = hash_tensor(mix(h, 1), v.toTensor());
        else if (v.isTensorList()) { h = mix(h, 2); for (const auto &t : v.toTensorVector()) h = hash_tensor(h, t); }
        else if (v.isInt()) h = mix(mix(h, 3), (uint64_t)v.toInt());
        else if (v.isBool()) h = mix(mix(h, 4), (uint64_t)v.toBool());
        else if (v.isDouble()) { double d = v.toDouble(); uint64_t b; memcpy(&b, &d, 8); h = mix(mix(h, 5), b); }
        else if (v.isIntList()) { h = mix(h, 6); for (auto i : v.toIntVector()) h = mix(h, (uint64_t)i); }
        else h = mix(h, 7);
    }
    return h;
}

void shape_json(std::ostringstream &o, const at::Tensor &t) {
    o << "[";
    if (t.defined())
        for (int64_t i = 0; i < t.dim(); i++) o << (i ? "," : "") << t.sizes()[i];
    o << "]";
}

std::string describe(const at::RecordFunction &fn) {
    std::string name = fn.name();
    for (size_t p; (p = name.find("::")) != std::string::npos;) name.replace(p, 2, ".");
    std::string overload = overload_of(fn);
    std::ostringstream shapes, dtypes, args;
    bool first = true;
    RecordedValues recorded = recorded_values(fn);
    size_t index = 0;
    for (const auto &v : fn.inputs()) {
        const char *sep = first ? "" : ",";
        first = false;
        shapes << sep;
        dtypes << sep;
        args << sep;
        bool valued = index++ == recorded.index;
        if (v.isTensor()) {
            shape_json(shapes, v.toTensor());
            dtypes << "\"" << (v.toTensor().defined() ? dtype_name(v.toTensor().scalar_type()) : "") << "\"";
            if (!valued) {
                args << "null";
            } else {
                args << "[";
                for (size_t j = 0; j < recorded.values.size(); j++) args << (j ? "," : "") << recorded.values[j];
                args << "]";
            }
        } else if (v.isTensorList()) {
            shapes << "[";
            dtypes << "[";
            bool f2 = true;
            for (const at::Tensor &t : v.toTensorVector()) {
                shapes << (f2 ? "" : ",");
                shape_json(shapes, t);
                dtypes << (f2 ? "" : ",") << "\"" << (t.defined() ? dtype_name(t.scalar_type()) : "") << "\"";
                f2 = false;
            }
            shapes << "]";
            dtypes << "]";
            args << "null";
        } else {
            shapes << "[]";
            dtypes << "\"\"";
            if (v.isInt()) args << v.toInt();
            else if (v.isBool()) args << (v.toBool() ? "true" : "false");
            else if (v.isDouble()) {
                double d = v.toDouble();
                if (std::isfinite(d)) args << d;
                else args << (std::isnan(d) ? "\"nan\"" : d > 0 ? "\"inf\"" : "\"-inf\"");
            }
            else if (v.isIntList()) {
                args << "[";
                bool f3 = true;
                for (auto i : v.toIntVector()) { args << (f3 ? "" : ",") << i; f3 = false; }
                args << "]";
            } else args << "null";
        }
    }
    std::ostringstream o;
    o << "{\"op\":\"" << name << "." << (overload.empty() ? "default" : overload) << "\",\"shapes\":["
      << shapes.str() << "],\"dtypes\":[" << dtypes.str() << "],\"args\":[" << args.str() << "],\"kwargs\":{}}";
    return o.str();
}

// The host work an op entry stands for (emulate/host_costs.py work_class counts the same in real profiler traces): 1 for
// an autograd node's evaluation, 0 for any other dispatcher op, -1 for scopes that are neither (profiler labels).
int work_class(const char *name) {
    static const char node_prefix[] = "autograd::engine::evaluate_function";
    if (std::strncmp(name, node_prefix, sizeof node_prefix - 1) == 0) return 1;
    if (std::strncmp(name, "autograd::", 10) == 0) return -1;
    const char *sep = std::strstr(name, "::");
    if (!sep || sep == name) return -1;
    for (const char *p = name; p < sep; p++)
        if (!(std::isalnum((unsigned char)*p) || *p == '_')) return -1;
    return 0;
}

// The op's id in the table (its name, input shapes, dtypes and scalars). Inputs whose sizes cannot be read here
// (symbolic shapes while compiling) make a record of the name alone: a callback must never throw.
int op_id(const at::RecordFunction &fn) {
    uint64_t key;
    std::string record;
    try {
        key = key_of(fn);
        record = describe(fn);
    } catch (const std::exception &) {
        key = 0xcbf29ce484222325ull;
        for (const char *p = fn.name(); *p; p++) key = mix(key, (unsigned char)*p);
        key = mix(key, 0xbad);
        std::string name = fn.name();
        for (size_t p; (p = name.find("::")) != std::string::npos;) name.replace(p, 2, ".");
        record = "{\"op\":\"" + name + ".default\",\"shapes\":[],\"dtypes\":[],\"args\":[],\"kwargs\":{}}";
    }
    std::lock_guard<std::mutex> g(table_lock);
    auto it = ids.find(key);
    if (it != ids.end()) return it->second;
    int id = (int)table.size();
    table.push_back(std::move(record));
    ids.emplace(key, id);
    return id;
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction &fn) {
    if (replaying) return nullptr;
    stepcast_pause();
    stepcast_count_python();  // once per thread: autograd's threads run Python hooks too (csrc/hostwork.c)
    int work = work_class(fn.name());
    if (work >= 0) stepcast_host_work(work);
    int id = op_id(fn);
    stack.push_back(id);
    stepcast_set_op(id);
    std::unique_ptr<at::ObserverContext> ctx;
    bool routed = route && std::strcmp(fn.name(), "aten::topk") == 0;
    if (routed || (stepcast_has_ranges() && replayable.count(fn.name()))) {
        auto saved = std::make_unique<SavedInputs>();
        saved->inputs.assign(fn.inputs().begin(), fn.inputs().end());
        ctx = std::move(saved);
    } else if (stepcast_has_ranges() && sized.count(fn.name())) {
        at::Tensor result = replay_sized(fn);
        if (result.defined()) {
            auto saved = std::make_unique<SavedInputs>();
            saved->result = result;
            stepcast_answer_readback(1, result.size(0));
            ctx = std::move(saved);
        }
    }
    stepcast_resume();
    return ctx;
}

void on_exit(const at::RecordFunction &fn, at::ObserverContext *ctx) {
    if (replaying) return;
    stepcast_pause();
    // replayable ops run on the host whether or not they launched a kernel (a 1-element sum launches none)
    bool topk = route && ctx && std::strcmp(fn.name(), "aten::topk") == 0;
    SavedInputs *saved = static_cast<SavedInputs *>(ctx);
    bool replayed = saved && saved->result.defined() ? fill_sized(fn, saved->result)
                                                     : ctx && !topk && replay_on_host(fn, saved);
    if (!replayed && stepcast_needs_untrack()) {  // a kernel wrote the outputs: remembered bytes stale
        for (const auto &v : fn.outputs()) {
            const void *p = v.isTensor() ? device_data(v.toTensor()) : nullptr;
            if (p) stepcast_untrack((unsigned long long)(uintptr_t)p, span_bytes(v.toTensor()));
        }
    }
    if (topk) route_topk(fn, static_cast<SavedInputs *>(ctx));
    if (!stack.empty()) stack.pop_back();
    stepcast_set_op(stack.empty() ? -1 : stack.back());
    stepcast_resume();
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int stepcast_opctx_install(void) {
    if (handle) return 1;
    handle = at::addGlobalCallback(at::RecordFunctionCallback(on_enter, on_exit)
                                       .needsInputs(true)
                                       .needsOutputs(true)
                                       .scopes({at::RecordScope::FUNCTION}));
    return handle != 0;
}

extern "C" __attribute__((visibility("default"))) void stepcast_opctx_remove(void) {
    if (handle) at::removeCallback(handle);
    handle = 0;
}

// How many ops the table holds (the capture layer saves the table again when it has grown).
extern "C" __attribute__((visibility("default"))) int stepcast_opctx_count(void) {
    std::lock_guard<std::mutex> g(table_lock);
    return static_cast<int>(table.size());
}

// The op table as one JSON array (the caller owns nothing: valid until the next call).
extern "C" __attribute__((visibility("default"))) const char *stepcast_opctx_table(void) {
    static std::string out;
    std::lock_guard<std::mutex> g(table_lock);
    out = "[";
    for (size_t i = 0; i < table.size(); i++) out += (i ? "," : "") + table[i];
    out += "]";
    return out.c_str();
}

// The stated routing's writer (emulate/stated_routing.py, through the capture layer); null: top-k is left alone.
extern "C" __attribute__((visibility("default"))) void stepcast_opctx_set_router(RouteFn fn) { route = fn; }
