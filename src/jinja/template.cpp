#include "jinja/template.h"

#include <unordered_map>

#include "jinja/builtins.h"
#include "jinja/parser.h"

namespace kvserve::jinja {

namespace {

// Bounds on one render, far past what a chat template needs.
constexpr size_t kMaxSteps = 1'000'000;   // loop iterations and macro calls
constexpr size_t kMaxOutput = 64u << 20;  // bytes
constexpr int kMaxCallDepth = 64;         // macro calls within macro calls
constexpr size_t kWorkBudget = size_t{1} << 28;  // bytes and elements copied or scanned (charge_work)
constexpr const char* kBody =
    "\x01"
    "body";  // the parser's name for a filter block's text

class Renderer {
 public:
  explicit Renderer(const Object& globals) : globals_(globals) { scopes_.push_back(std::make_shared<Scope>()); }

  enum class Flow { Normal, Break, Continue };

  // Namespaces are the only values a template can change after making them, so the only way to a cycle
  // of shared values ({% set ns.self = [ns] %}): emptied at the end, they free what they hold.
  ~Renderer() {
    for (const auto& ns : namespaces_) ns->items.clear();
  }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  std::string run(const Body& body) {
    render(body);
    return std::move(out_);
  }

 private:
  using Scope = std::unordered_map<std::string, Value>;

  void step() {
    if (++steps_ > kMaxSteps) fail("template render took more than {} loop steps", kMaxSteps);
  }

  void emit(const std::string& s) {
    charge_work(s.size());
    if (out_.size() + s.size() > kMaxOutput) fail("template output is over {} bytes", kMaxOutput);
    out_ += s;
  }

  Value lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it)
      if (auto f = (*it)->find(name); f != (*it)->end()) return f->second;
    if (const Value* v = globals_.find(name)) return *v;
    if (name == "namespace") {
      return Value(Function([this](const CallArgs& a) {
        Value ns = global_function("namespace").as_function()(a);
        namespaces_.push_back(ns.object_ptr());
        return ns;
      }));
    }
    return global_function(name);
  }

  void assign(const std::string& name, Value v) { (*scopes_.back())[name] = std::move(v); }

  void bind_targets(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      assign(targets[0], v);
      return;
    }
    const Array items = iterate(v);
    if (items.size() != targets.size()) fail("cannot unpack {} values into {} names", items.size(), targets.size());
    for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], items[i]);
  }

  Flow render(const Body& body) {
    for (const auto& n : body) {
      const Flow f = render(*n);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  // The body's output, rendered into its own buffer.
  std::string capture(const Body& body) {
    std::string saved = std::move(out_);
    out_.clear();
    render(body);
    std::string text = std::move(out_);
    out_ = std::move(saved);
    return text;
  }

  Value filtered_text(const Expr& filter, std::string text) {
    scopes_.push_back(std::make_shared<Scope>());
    assign(kBody, Value(std::move(text)));
    Value v = eval(filter);
    scopes_.pop_back();
    return v;
  }

  Flow render(const Node& n) {
    switch (n.kind) {
      case Node::Kind::Text:
        emit(n.text);
        return Flow::Normal;
      case Node::Kind::Output:
        emit(eval(*n.expr).str());
        return Flow::Normal;
      case Node::Kind::If:
        for (const auto& [cond, body] : n.branches)
          if (!cond || eval(*cond).truthy()) return render(body);
        return Flow::Normal;
      case Node::Kind::For:
        return render_for(n);
      case Node::Kind::Set:
        if (!n.attr.empty()) {
          Value target = lookup(n.targets[0]);
          if (!target.is_object() || !target.as_object().is_namespace)
            fail("template line {}: cannot assign attribute '{}' on a non-namespace object", n.line, n.attr);
          target.as_object().set(n.attr, eval(*n.expr));
        } else {
          bind_targets(n.targets, eval(*n.expr));
        }
        return Flow::Normal;
      case Node::Kind::SetBlock: {
        std::string text = capture(n.body);
        assign(n.targets[0], n.filter ? filtered_text(*n.filter, std::move(text)) : Value(std::move(text)));
        return Flow::Normal;
      }
      case Node::Kind::Macro: {
        const Node* macro = &n;
        assign(n.text, Value(Function([this, macro](const CallArgs& a) { return call_macro(*macro, a); })));
        return Flow::Normal;
      }
      case Node::Kind::Break:
        return Flow::Break;
      case Node::Kind::Continue:
        return Flow::Continue;
      case Node::Kind::FilterBlock:
        emit(filtered_text(*n.filter, capture(n.body)).str());
        return Flow::Normal;
      case Node::Kind::Scope:
        return render(n.body);
    }
    return Flow::Normal;
  }

  Flow render_for(const Node& n) {
    Array items = iterate(eval(*n.expr));
    if (n.filter) {
      Array kept;
      for (const Value& item : items) {
        step();
        scopes_.push_back(std::make_shared<Scope>());
        bind_targets(n.targets, item);
        const bool keep = eval(*n.filter).truthy();
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      scopes_.push_back(std::make_shared<Scope>());
      render(n.else_body);
      scopes_.pop_back();
      return Flow::Normal;
    }
    const auto len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      step();
      auto loop = std::make_shared<Object>();
      loop->items = {{"index", Value(i + 1)},
                     {"index0", Value(i)},
                     {"revindex", Value(len - i)},
                     {"revindex0", Value(len - i - 1)},
                     {"first", Value(i == 0)},
                     {"last", Value(i == len - 1)},
                     {"length", Value(len)},
                     {"depth", Value(1)},
                     {"depth0", Value(0)},
                     {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value()},
                     {"nextitem", i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value()},
                     {"cycle", Value(Function([i](const CallArgs& a) {
                        if (a.positional.empty()) fail("loop.cycle() needs at least one value");
                        return a.positional[static_cast<size_t>(i) % a.positional.size()];
                      }))}};
      scopes_.push_back(std::make_shared<Scope>());
      assign("loop", Value(std::move(loop)));
      bind_targets(n.targets, items[static_cast<size_t>(i)]);
      const Flow f = render(n.body);
      scopes_.pop_back();
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }

  Value call_macro(const Node& m, const CallArgs& a) {
    step();
    if (call_depth_ >= kMaxCallDepth) fail("macro calls nested deeper than {}", kMaxCallDepth);
    // A macro sees the template's top-level names and its arguments, not its caller's loop variables; a
    // parameter's default may use the parameters before it.
    struct Frame {
      Frame(Renderer& r, std::shared_ptr<Scope> scope) : r(r), saved(std::move(r.scopes_)) {
        r.scopes_ = {saved.front(), std::move(scope)};
        ++r.call_depth_;
      }
      ~Frame() {
        r.scopes_ = std::move(saved);
        --r.call_depth_;
      }
      Renderer& r;
      std::vector<std::shared_ptr<Scope>> saved;
    };
    auto scope = std::make_shared<Scope>();
    const Frame frame(*this, scope);
    for (size_t i = 0; i < m.params.size(); ++i) {
      const auto& [name, def] = m.params[i];
      const Value* v = a.get(i, name);
      (*scope)[name] = v != nullptr ? *v : def ? eval(*def) : Value();
    }
    Array varargs;
    for (size_t i = m.params.size(); i < a.positional.size(); ++i) varargs.push_back(a.positional[i]);
    auto kwargs = std::make_shared<Object>();
    for (const auto& kv : a.named) {
      const bool is_param =
          std::any_of(m.params.begin(), m.params.end(), [&](const auto& p) { return p.first == kv.first; });
      if (!is_param) kwargs->set(kv.first, kv.second);
    }
    (*scope)["varargs"] = Value(std::move(varargs));
    (*scope)["kwargs"] = Value(std::move(kwargs));
    return Value(capture(m.body));
  }

  CallArgs eval_args(const Expr& e) {
    CallArgs a;
    for (const auto& x : e.items) a.positional.push_back(eval(*x));
    for (const auto& [k, x] : e.kwargs) a.named.emplace_back(k, eval(*x));
    return a;
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Literal:
        return e.value;
      case Expr::Kind::Name:
        return lookup(e.name);
      case Expr::Kind::List: {
        Array items;
        for (const auto& x : e.items) items.push_back(eval(*x));
        return e.tuple ? Value::tuple(std::move(items)) : Value(std::move(items));
      }
      case Expr::Kind::Dict: {
        auto o = std::make_shared<Object>();
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          // Keys are strings here; a number key is kept as its text (json.dumps writes it so too).
          const Value key = eval(*e.items[i]);
          if (!key.is_string() && !key.is_number())
            fail("template line {}: dict keys must be strings or numbers, got {}", e.line, key.type_name());
          o->set(key.str(), eval(*e.items[i + 1]));
          if (key.is_number()) o->number_keys.emplace_back(key.str(), key);
        }
        return Value(std::move(o));
      }
      case Expr::Kind::Attr: {
        const Value obj = eval(*e.a);
        if (obj.is_undefined())
          fail("template line {}: {} is undefined (reading '.{}')", e.line, describe(*e.a), e.name);
        return get_attr(obj, e.name);
      }
      case Expr::Kind::Index: {
        const Value obj = eval(*e.a);
        if (obj.is_undefined()) fail("template line {}: {} is undefined (reading an item)", e.line, describe(*e.a));
        return get_item(obj, eval(*e.b));
      }
      case Expr::Kind::Slice:
        return get_slice(eval(*e.a), e.b ? eval(*e.b) : Value(), e.c ? eval(*e.c) : Value(),
                         e.items.empty() ? Value() : eval(*e.items[0]));
      case Expr::Kind::Call: {
        const Value f = eval(*e.a);
        if (!f.is_function()) {
          if (f.is_undefined())
            fail("template line {}: {} is undefined (called as a function)", e.line, describe(*e.a));
          fail("template line {}: '{}' object is not callable", e.line, f.type_name());
        }
        return f.as_function()(eval_args(e));
      }
      case Expr::Kind::Filter: {
        const Value v = eval(*e.a);
        return apply_filter(e.name, v, eval_args(e));
      }
      case Expr::Kind::Test: {
        const Value v = eval(*e.a);
        return Value(apply_test(e.name, v, eval_args(e)) != e.negated);
      }
      case Expr::Kind::Neg: {
        const Value v = eval(*e.a);
        if (v.kind() == Value::Kind::Float) return Value(-v.as_double());
        if (v.is_int()) return Value(checked_sub(0, v.as_int()));
        fail("template line {}: bad operand type for unary -: '{}'", e.line, v.type_name());
      }
      case Expr::Kind::Not:
        return Value(!eval(*e.a).truthy());
      case Expr::Kind::And: {
        Value a = eval(*e.a);
        return a.truthy() ? eval(*e.b) : a;
      }
      case Expr::Kind::Or: {
        Value a = eval(*e.a);
        return a.truthy() ? a : eval(*e.b);
      }
      case Expr::Kind::Binary:
        return binary_op(e.name, eval(*e.a), eval(*e.b));
      case Expr::Kind::Compare: {
        const Value a = eval(*e.a), b = eval(*e.b);
        if (e.name == "==") return Value(equals(a, b));
        if (e.name == "!=") return Value(!equals(a, b));
        if (e.name == "<") return Value(less_than(a, b));
        if (e.name == ">") return Value(less_than(b, a));
        if (e.name == "<=") return Value(!less_than(b, a));
        if (e.name == ">=") return Value(!less_than(a, b));
        if (e.name == "in") return Value(contains(b, a));
        return Value(!contains(b, a));
      }
      case Expr::Kind::Conditional:
        if (eval(*e.a).truthy()) return eval(*e.b);
        return e.c ? eval(*e.c) : Value();
    }
    return {};
  }

  // How an error message names the expression that was undefined.
  static std::string describe(const Expr& e) {
    if (e.kind == Expr::Kind::Name) return "'" + e.name + "'";
    if (e.kind == Expr::Kind::Attr) return describe(*e.a) + "." + e.name;
    return "a value";
  }

  const Object& globals_;
  std::vector<std::shared_ptr<Scope>> scopes_;
  std::string out_;
  std::vector<std::shared_ptr<Object>> namespaces_;
  size_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace

Template::Template(std::string_view source) : body_(std::make_shared<const Body>(parse_template(source))) {}

std::string Template::render(const Object& globals) const {
  const WorkBudget budget(kWorkBudget);
  return Renderer(globals).run(*body_);
}

}  // namespace kvserve::jinja
