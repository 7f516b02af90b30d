#include "jinja/parser.h"

#include <charconv>
#include <cstdlib>

#include "core/error.h"
#include "jinja/lexer.h"

namespace kvserve::jinja {

namespace {

// Deeper nesting than any real template has; it bounds the parser's (and the renderer's) recursion.
constexpr int kMaxDepth = 200;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse() {
    Body body = parse_body({});
    if (peek().type != Token::Type::End) error("unexpected '{% " + stop_word_ + " %}'");
    return body;
  }

 private:
  const Token& peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[p_];
    if (p_ + 1 < t_.size()) ++p_;
    return t;
  }
  [[noreturn]] void error(const std::string& what) const { fail("template line {}: {}", peek().line, what); }

  bool is_op(std::string_view op, size_t k = 0) const { return peek(k).type == Token::Type::Op && peek(k).text == op; }
  bool is_name(std::string_view name, size_t k = 0) const {
    return peek(k).type == Token::Type::Name && peek(k).text == name;
  }
  void expect_op(std::string_view op) {
    if (!is_op(op)) error("expected '" + std::string(op) + "'" + got());
    next();
  }
  std::string expect_name() {
    if (peek().type != Token::Type::Name) error("expected a name" + got());
    return next().text;
  }
  void expect_block_end() {
    if (peek().type != Token::Type::BlockEnd) error("expected the end of the tag" + got());
    next();
  }
  std::string got() const {
    const Token& t = peek();
    switch (t.type) {
      case Token::Type::End:
        return ", got the end of the template";
      case Token::Type::VarEnd:
      case Token::Type::BlockEnd:
        return ", got the end of the tag";
      default:
        return ", got '" + t.text + "'";
    }
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p(p) {
      if (++p.depth_ > kMaxDepth) p.error("nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
    Parser& p;
  };
  // A chain (a.b.c, a + b + c, x | f | g) deepens the tree by one a link, as nesting does: the renderer
  // and the tree's destructor recurse that deep.
  struct ChainGuard {
    explicit ChainGuard(Parser& p) : p(p) {}
    void link() {
      ++n;
      if (++p.depth_ > kMaxDepth) p.error("expression nested too deeply");
    }
    ~ChainGuard() { p.depth_ -= n; }
    Parser& p;
    int n = 0;
  };

  // Statements until a block tag whose first word is one of `stops` (left unread: stop_word_ names it).
  Body parse_body(std::initializer_list<std::string_view> stops) {
    DepthGuard guard(*this);
    Body body;
    for (;;) {
      const Token& t = peek();
      if (t.type == Token::Type::End) {
        stop_word_.clear();
        if (stops.size() != 0) error("missing '{% " + std::string(*stops.begin()) + " %}'");
        return body;
      }
      if (t.type == Token::Type::Text) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Text;
        n->line = t.line;
        n->text = next().text;
        body.push_back(std::move(n));
        continue;
      }
      if (t.type == Token::Type::VarBegin) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::Output;
        n->line = next().line;
        n->expr = parse_expr();
        if (peek().type != Token::Type::VarEnd) error("expected '}}'" + got());
        next();
        body.push_back(std::move(n));
        continue;
      }
      if (t.type != Token::Type::BlockBegin) error("unexpected token" + got());
      const Token& word = peek(1);
      if (word.type != Token::Type::Name) {
        next();
        error("expected a statement name" + got());
      }
      for (std::string_view s : stops)
        if (word.text == s) {
          stop_word_ = word.text;
          return body;
        }
      next();  // {%
      body.push_back(parse_statement());
    }
  }

  // Reads "{% word" of the tag that stopped parse_body.
  std::string take_stop() {
    next();
    return next().text;
  }

  std::unique_ptr<Node> parse_statement() {
    const size_t line = peek().line;
    const std::string word = next().text;
    auto n = std::make_unique<Node>();
    n->line = line;
    if (word == "if") {
      n->kind = Node::Kind::If;
      ExprPtr cond = parse_expr();
      for (;;) {
        expect_block_end();
        Body b = parse_body({"elif", "else", "endif"});
        n->branches.emplace_back(std::move(cond), std::move(b));
        const std::string stop = take_stop();
        if (stop == "elif") {
          cond = parse_expr();
          continue;
        }
        if (stop == "else") {
          expect_block_end();
          Body e = parse_body({"endif"});
          n->branches.emplace_back(nullptr, std::move(e));
          take_stop();
        }
        expect_block_end();
        return n;
      }
    }
    if (word == "for") {
      n->kind = Node::Kind::For;
      n->targets.push_back(expect_name());
      while (is_op(",")) {
        next();
        n->targets.push_back(expect_name());
      }
      if (!is_name("in")) error("expected 'in'" + got());
      next();
      n->expr = parse_expr(/*with_conditional=*/false);
      if (is_name("if")) {
        next();
        n->filter = parse_expr();
      }
      if (is_name("recursive")) error("recursive loops are not supported");
      expect_block_end();
      n->body = parse_body({"else", "endfor"});
      if (take_stop() == "else") {
        expect_block_end();
        n->else_body = parse_body({"endfor"});
        take_stop();
      }
      expect_block_end();
      return n;
    }
    if (word == "set") {
      const std::string first = expect_name();
      if (is_op(".")) {
        next();
        n->kind = Node::Kind::Set;
        n->targets.push_back(first);
        n->attr = expect_name();
        expect_op("=");
        n->expr = parse_tuple_or_expr();
        expect_block_end();
        return n;
      }
      n->targets.push_back(first);
      while (is_op(",")) {
        next();
        n->targets.push_back(expect_name());
      }
      if (peek().type == Token::Type::BlockEnd || is_op("|")) {
        if (n->targets.size() != 1) error("a block set assigns one name");
        n->kind = Node::Kind::SetBlock;
        if (is_op("|")) n->filter = parse_filters(placeholder());
        expect_block_end();
        n->body = parse_body({"endset"});
        take_stop();
        expect_block_end();
        return n;
      }
      n->kind = Node::Kind::Set;
      expect_op("=");
      n->expr = parse_tuple_or_expr();
      expect_block_end();
      return n;
    }
    if (word == "macro") {
      n->kind = Node::Kind::Macro;
      n->text = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        std::string param = expect_name();
        ExprPtr def;
        if (is_op("=")) {
          next();
          def = parse_expr();
        }
        n->params.emplace_back(std::move(param), std::move(def));
        if (!is_op(",")) break;
        next();
      }
      expect_op(")");
      expect_block_end();
      n->body = parse_body({"endmacro"});
      take_stop();
      if (peek().type == Token::Type::Name) next();  // {% endmacro name %}
      expect_block_end();
      return n;
    }
    if (word == "break" || word == "continue") {
      n->kind = word == "break" ? Node::Kind::Break : Node::Kind::Continue;
      expect_block_end();
      return n;
    }
    if (word == "filter") {
      n->kind = Node::Kind::FilterBlock;
      n->filter = parse_filters(placeholder(), /*first_bar=*/false);
      expect_block_end();
      n->body = parse_body({"endfilter"});
      take_stop();
      expect_block_end();
      return n;
    }
    if (word == "generation") {  // transformers' marker of assistant text: rendered as it is
      n->kind = Node::Kind::Scope;
      expect_block_end();
      n->body = parse_body({"endgeneration"});
      take_stop();
      expect_block_end();
      return n;
    }
    error("'{% " + word + " %}' is not supported");
  }

  static ExprPtr make(Expr::Kind kind, size_t line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  // The value a {% filter %} or block set passes to its filters.
  ExprPtr placeholder() {
    auto e = make(Expr::Kind::Name, peek().line);
    e->name =
        "\x01"
        "body";  // a name no template can write
    return e;
  }

  // `a, b` without brackets (set x = a, b) is a tuple.
  ExprPtr parse_tuple_or_expr() {
    ExprPtr e = parse_expr();
    if (!is_op(",")) return e;
    auto list = make(Expr::Kind::List, e->line);
    list->tuple = true;
    list->items.push_back(std::move(e));
    while (is_op(",")) {
      next();
      list->items.push_back(parse_expr());
    }
    return list;
  }

  ExprPtr parse_expr(bool with_conditional = true) {
    DepthGuard guard(*this);
    ExprPtr e = parse_or();
    ChainGuard chain(*this);
    while (with_conditional && is_name("if")) {
      chain.link();
      next();
      auto c = make(Expr::Kind::Conditional, e->line);
      c->a = parse_or();
      c->b = std::move(e);
      if (is_name("else")) {
        next();
        c->c = parse_expr();
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    ChainGuard chain(*this);
    while (is_name("or")) {
      chain.link();
      next();
      auto o = make(Expr::Kind::Or, e->line);
      o->a = std::move(e);
      o->b = parse_and();
      e = std::move(o);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    ChainGuard chain(*this);
    while (is_name("and")) {
      chain.link();
      next();
      auto o = make(Expr::Kind::And, e->line);
      o->a = std::move(e);
      o->b = parse_not();
      e = std::move(o);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      const size_t line = next().line;
      auto n = make(Expr::Kind::Not, line);
      n->a = parse_not();
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    ChainGuard chain(*this);
    for (;;) {
      std::string op;
      if (peek().type == Token::Type::Op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                             peek().text == ">" || peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        return e;
      }
      // a < b < c is (a < b) and (b < c) in Python; templates do not chain, so it is left-associative here.
      chain.link();
      auto c = make(Expr::Kind::Compare, e->line);
      c->name = op;
      c->a = std::move(e);
      c->b = parse_math1();
      e = std::move(c);
    }
  }

  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::Kind::Binary, a->line);
    e->name = std::move(op);
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    ChainGuard chain(*this);
    while (is_op("+") || is_op("-")) {
      chain.link();
      std::string op = next().text;
      e = binary(op, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    ChainGuard chain(*this);
    while (is_op("~")) {
      chain.link();
      next();
      e = binary("~", std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    ChainGuard chain(*this);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      chain.link();
      std::string op = next().text;
      e = binary(op, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary();
    ChainGuard chain(*this);
    while (is_op("**")) {
      chain.link();
      next();
      e = binary("**", std::move(e), parse_unary());
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter = true) {
    DepthGuard guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const bool neg = next().text == "-";
      ExprPtr operand = parse_unary(false);
      if (neg) {
        e = make(Expr::Kind::Neg, operand->line);
        e->a = std::move(operand);
      } else {
        e = std::move(operand);
      }
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filters(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    const size_t line = t.line;
    switch (t.type) {
      case Token::Type::String: {
        std::string s = next().text;
        while (peek().type == Token::Type::String) s += next().text;  // "a" "b" is "ab"
        auto e = make(Expr::Kind::Literal, line);
        e->value = Value(std::move(s));
        return e;
      }
      case Token::Type::Int: {
        const std::string& text = next().text;
        int64_t v = 0;
        const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
        auto e = make(Expr::Kind::Literal, line);
        if (r.ec == std::errc()) {
          e->value = Value(v);
        } else {
          e->value = Value(std::strtod(text.c_str(), nullptr));  // past int64: kept as a float
        }
        return e;
      }
      case Token::Type::Float: {
        auto e = make(Expr::Kind::Literal, line);
        e->value = Value(std::strtod(next().text.c_str(), nullptr));
        return e;
      }
      case Token::Type::Name: {
        const std::string name = next().text;
        auto e = make(Expr::Kind::Literal, line);
        if (name == "true" || name == "True") {
          e->value = Value(true);
        } else if (name == "false" || name == "False") {
          e->value = Value(false);
        } else if (name == "none" || name == "None") {
          e->value = Value::none();
        } else {
          e->kind = Expr::Kind::Name;
          e->name = name;
        }
        return e;
      }
      case Token::Type::Op:
        if (t.text == "(") {
          next();
          if (is_op(")")) {  // ()
            next();
            auto empty = make(Expr::Kind::List, line);
            empty->tuple = true;
            return empty;
          }
          ExprPtr e = parse_expr();
          if (is_op(",")) {
            auto list = make(Expr::Kind::List, line);
            list->tuple = true;
            list->items.push_back(std::move(e));
            while (is_op(",")) {
              next();
              if (is_op(")")) break;
              list->items.push_back(parse_expr());
            }
            e = std::move(list);
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          auto list = make(Expr::Kind::List, line);
          while (!is_op("]")) {
            list->items.push_back(parse_expr());
            if (!is_op(",")) break;
            next();
          }
          expect_op("]");
          return list;
        }
        if (t.text == "{") {
          next();
          auto dict = make(Expr::Kind::Dict, line);
          while (!is_op("}")) {
            dict->items.push_back(parse_expr());
            expect_op(":");
            dict->items.push_back(parse_expr());
            if (!is_op(",")) break;
            next();
          }
          expect_op("}");
          return dict;
        }
        break;
      default:
        break;
    }
    error("expected an expression" + got());
  }

  void parse_call_args(Expr& call) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().type == Token::Type::Name && is_op("=", 1)) {
        std::string key = next().text;
        next();
        call.kwargs.emplace_back(std::move(key), parse_expr());
      } else {
        if (!call.kwargs.empty()) error("a positional argument follows a keyword argument");
        call.items.push_back(parse_expr());
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    ChainGuard chain(*this);
    for (;;) {
      if (is_op(".") || is_op("[") || is_op("(")) chain.link();
      if (is_op(".")) {
        next();
        auto a = make(Expr::Kind::Attr, e->line);
        if (peek().type == Token::Type::Int) {  // foo.0 is foo[0]
          a->kind = Expr::Kind::Index;
          a->b = make(Expr::Kind::Literal, e->line);
          a->b->value = Value(static_cast<int64_t>(std::atoll(next().text.c_str())));
        } else {
          a->name = expect_name();
        }
        a->a = std::move(e);
        e = std::move(a);
      } else if (is_op("[")) {
        next();
        ExprPtr parts[3];
        int n_parts = 1;
        bool slice = false;
        for (;;) {
          if (is_op(":")) {
            slice = true;
            next();
            if (++n_parts > 3) error("a slice has at most three parts");
            continue;
          }
          if (is_op("]")) break;
          if (parts[n_parts - 1]) error("expected ']'" + got());
          parts[n_parts - 1] = parse_expr();
        }
        next();
        auto x = make(slice ? Expr::Kind::Slice : Expr::Kind::Index, e->line);
        if (!slice && !parts[0]) error("empty subscript");
        x->a = std::move(e);
        x->b = std::move(parts[0]);
        x->c = std::move(parts[1]);
        if (slice && parts[2]) x->items.push_back(std::move(parts[2]));
        e = std::move(x);
      } else if (is_op("(")) {
        auto c = make(Expr::Kind::Call, e->line);
        c->a = std::move(e);
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filters(ExprPtr e, bool first_bar = true) {
    bool need_bar = first_bar;
    ChainGuard chain(*this);
    for (;;) {
      if (!need_bar || is_op("|") || is_name("is")) chain.link();
      if (need_bar ? is_op("|") : true) {
        if (need_bar) next();
        need_bar = true;
        auto f = make(Expr::Kind::Filter, e->line);
        f->name = expect_name();
        while (is_op(".")) {  // dotted filter names
          next();
          f->name += '.';
          f->name += expect_name();
        }
        f->a = std::move(e);
        if (is_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (is_name("is")) {
        next();
        auto t = make(Expr::Kind::Test, e->line);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        t->name = expect_name();
        t->a = std::move(e);
        if (is_op("(")) {
          parse_call_args(*t);
        } else {
          const Token& n = peek();
          const bool arg_follows =
              n.type == Token::Type::String || n.type == Token::Type::Int || n.type == Token::Type::Float ||
              (n.type == Token::Type::Name && n.text != "else" && n.text != "or" && n.text != "and" && n.text != "if" &&
               n.text != "in" && n.text != "not" && n.text != "is") ||
              (n.type == Token::Type::Op && (n.text == "[" || n.text == "{"));
          if (arg_follows) t->items.push_back(parse_postfix(parse_primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  int depth_ = 0;
  std::string stop_word_;
};

}  // namespace

Body parse_template(std::string_view source) { return Parser(tokenize(source)).parse(); }

}  // namespace kvserve::jinja
