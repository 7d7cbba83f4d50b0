#include "diskformer/server/server.h"

#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <optional>
#include <random>
#include <regex>

#include "diskformer/server/logprobs_json.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/page_assets.h"
#include "server/prompt.h"
#include "server/request.h"
#include "server/responses.h"
#include "server/scheduler.h"

namespace df::server {

namespace {

using httplib::Request;
using httplib::Response;
using HandlerResponse = httplib::Server::HandlerResponse;

// How often a handler waiting for tokens looks whether its client is still there.
constexpr std::chrono::milliseconds kClientCheck{200};

const char* const kRoutes[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/"};

bool needs_key(const std::string& path) { return path.rfind("/v1/", 0) == 0 || path == "/v1" || path == "/metrics"; }

// Equal strings compare in a time that does not depend on where they differ.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

void send_error(Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump_json(error_body(e)), "application/json");
}

std::string sse(const ojson& j) { return "data: " + dump_json(j) + "\n\n"; }

}  // namespace

struct Server::Impl {
  Impl(engine::Model& m, tokenizer::Tokenizer t, const ServerOptions& opts, PromptBuilder p, const HttpLimits& limits)
      : model(m), tok(std::move(t)), o(opts), prompts(std::move(p)), http(limits) {}

  engine::Model& model;
  tokenizer::Tokenizer tok;
  ServerOptions o;
  PromptBuilder prompts;
  std::unique_ptr<Scheduler> sched;
  HttpServer http;
  int port = -1;
  RequestCounters counters;
  std::atomic<uint64_t> next_id{1};
  std::string id_prefix;
  int64_t started = 0;

  std::mutex mu;
  std::condition_variable cv;
  int active = 0;  // generation responses not yet finished
  bool stopped = false;

  void routes();
  void generation(Endpoint ep, const Request& req, Response& res);
  std::optional<ApiError> params_of(const ApiRequest& r, GenParams& p) const;
  void stream(std::shared_ptr<Job> job, ResponseMeta meta, bool include_usage, Response& res);
  void collect(const std::shared_ptr<Job>& job, const ResponseMeta& meta, Connection* conn, Response& res);
  void end_generation() {
    {
      std::lock_guard<std::mutex> lock(mu);
      --active;
    }
    cv.notify_all();
  }
};

std::optional<ApiError> Server::Impl::params_of(const ApiRequest& r, GenParams& p) const {
  if (auto e = prompts.build(r, p.prompt)) return e;
  const uint32_t n_ctx = model.n_ctx();
  const std::string param = r.endpoint == Endpoint::kChat ? "messages" : "prompt";
  if (p.prompt.size() > n_ctx)
    return bad_request("the prompt has " + std::to_string(p.prompt.size()) + " tokens, more than the context of " +
                           std::to_string(n_ctx) + " tokens",
                       param, "context_length_exceeded");
  if (r.max_tokens && uint64_t(*r.max_tokens) + p.prompt.size() > n_ctx)
    return bad_request("max_tokens " + std::to_string(*r.max_tokens) + " and the prompt's " +
                           std::to_string(p.prompt.size()) + " tokens exceed the context of " + std::to_string(n_ctx) +
                           " tokens",
                       "max_tokens", "context_length_exceeded");
  p.max_tokens = r.max_tokens ? int32_t(*r.max_tokens) : o.defaults.n_predict;
  p.ignore_eos = r.ignore_eos.value_or(o.defaults.ignore_eos);
  p.sampling = o.defaults.sampling;
  const SamplingOverrides& s = r.sampling;
  if (s.temperature) p.sampling.temp = *s.temperature;
  if (s.top_p) p.sampling.top_p = *s.top_p;
  if (s.min_p) p.sampling.min_p = *s.min_p;
  if (s.top_k) p.sampling.top_k = *s.top_k;
  if (s.repeat_penalty) p.sampling.repeat_penalty = *s.repeat_penalty;
  if (s.seed && *s.seed >= 0) {
    p.sampling.seed = uint64_t(*s.seed);
  } else if (s.seed || !o.fixed_seed) {
    p.sampling.seed = std::random_device{}();
  }
  p.stop = r.stop;
  p.n_probs = r.n_probs;
  return std::nullopt;
}

void Server::Impl::generation(Endpoint ep, const Request& req, Response& res) {
  ApiRequest r;
  if (auto e = parse_request(ep, req.body, r)) return send_error(res, *e);
  GenParams p;
  if (auto e = params_of(r, p)) return send_error(res, *e);
  ResponseMeta meta{.endpoint = ep,
                    .id = std::string(ep == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + id_prefix +
                          std::to_string(next_id++),
                    .created = int64_t(std::time(nullptr)),
                    .model = o.model_name,
                    .n_probs = r.n_probs};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopped)
      return send_error(res, {.status = 503, .message = "the server is shutting down", .type = "server_error",
                              .code = "server_shutting_down"});
    ++active;
  }
  std::shared_ptr<Job> job = sched->submit(std::move(p));
  if (!job) {
    end_generation();
    return send_error(res, {.status = 503,
                            .message = "the server is busy: " + std::to_string(o.max_queue) +
                                       " requests are waiting already; try again later",
                            .type = "server_error",
                            .code = "server_busy"});
  }
  if (r.stream) return stream(std::move(job), std::move(meta), r.include_usage, res);
  collect(job, meta, http.connection(req), res);
  end_generation();
}

void Server::Impl::collect(const std::shared_ptr<Job>& job, const ResponseMeta& meta, Connection* conn,
                           Response& res) {
  std::string text;
  std::vector<TokenOut> tokens;
  std::vector<JobEvent> events;
  for (;;) {
    const bool done = job->wait(events, kClientCheck);
    for (JobEvent& e : events) {
      text += e.text;
      for (TokenOut& t : e.tokens) tokens.push_back(std::move(t));
    }
    events.clear();
    if (done) break;
    if (conn && conn->client_gone()) {
      // Nobody will read the reply: free the slot now.
      job->cancel();
      res.status = 499;
      return;
    }
  }
  const JobResult result = job->result();
  if (result.error) return send_error(res, *result.error);
  res.set_content(dump_json(completion_json(tok, meta, text, tokens, result)), "application/json");
}

void Server::Impl::stream(std::shared_ptr<Job> job, ResponseMeta meta, bool include_usage, Response& res) {
  struct State {
    std::shared_ptr<Job> job;
    ResponseMeta meta;
    bool include_usage = false;
    bool started = false;
    size_t offset = 0;  // text sent so far (the legacy completions' text_offset)
  };
  auto st = std::make_shared<State>(State{std::move(job), std::move(meta), include_usage});
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        if (!st->started) {
          st->started = true;
          if (st->meta.endpoint == Endpoint::kChat && !write(sse(role_chunk(st->meta)))) return false;
        }
        std::vector<JobEvent> events;
        const bool done = st->job->wait(events, kClientCheck);
        for (const JobEvent& e : events) {
          if (!write(sse(delta_chunk(tok, st->meta, e, st->offset)))) return false;
          st->offset += e.text.size();
        }
        if (!done) return events.empty() ? sink.is_writable() : true;
        const JobResult r = st->job->result();
        if (r.error) {
          write(sse(error_body(*r.error)));
        } else {
          if (!write(sse(finish_chunk(st->meta, r)))) return false;
          if (st->include_usage && !write(sse(usage_chunk(st->meta, r)))) return false;
          if (!write("data: [DONE]\n\n")) return false;
        }
        sink.done();
        return true;
      },
      // Runs once the response is over, written or not: a job whose client went away is cancelled (a finished
      // one is unaffected).
      [this, st](bool) {
        st->job->cancel();
        end_generation();
      });
}

void Server::Impl::routes() {
  // Refused before the body is read: no key, or a body declared larger than the limit. With Expect: 100-continue
  // the client is told so instead of being asked for the body.
  auto refuse_early = [this](const Request& req, Response& res) {
    if (!o.api_key.empty() && needs_key(req.path)) {
      const std::string auth = req.get_header_value("Authorization");
      if (!same_secret(auth, "Bearer " + o.api_key)) {
        send_error(res, {.status = 401,
                         .message = auth.empty() ? "an API key is required: send Authorization: Bearer KEY"
                                                 : "the API key is not valid",
                         .type = "authentication_error",
                         .code = "invalid_api_key"});
        res.set_header("WWW-Authenticate", "Bearer");
        return true;
      }
    }
    if (req.has_header("Content-Length")) {
      const std::string v = req.get_header_value("Content-Length");
      char* end = nullptr;
      const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n > o.max_body_bytes) {
        send_error(res, {.status = 413,
                         .message = "the request body is larger than the limit of " + std::to_string(o.max_body_bytes) +
                                    " bytes (serve --max-body)",
                         .code = "request_too_large"});
        return true;
      }
    }
    return false;
  };
  http.set_pre_routing_handler([this, refuse_early](const Request& req, Response& res) {
    if (!refuse_early(req, res)) return HandlerResponse::Unhandled;
    // The body is not read: the connection ends after the response.
    if (req.has_header("Content-Length") || req.has_header("Transfer-Encoding"))
      if (Connection* conn = http.connection(req)) conn->close_after_response();
    return HandlerResponse::Handled;
  });
  http.set_expect_100_continue_handler([this, refuse_early](const Request& req, Response& res) {
    if (!refuse_early(req, res)) return 100;
    if (Connection* conn = http.connection(req)) conn->close_after_response();
    return res.status;
  });

  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const Request& req, Response& res) {
    if (!res.body.empty()) return HandlerResponse::Unhandled;  // a handler's own error object
    Connection* conn = http.connection(req);
    ApiError e{.status = res.status};
    switch (res.status) {
      case 400:
        if (conn && conn->over_limit()) {
          e = {.status = 413,
               .message = "the request is larger than the limit of " + std::to_string(o.max_body_bytes) +
                          " bytes for its body (serve --max-body)",
               .code = "request_too_large"};
        } else {
          e.message = "malformed HTTP request";
        }
        if (conn) conn->close_after_response();
        break;
      case 404:
        e.message = "no route for " + req.method + " " + req.path;
        e.code = "not_found";
        break;
      case 413:
        e.message = "the request body is larger than the limit of " + std::to_string(o.max_body_bytes) + " bytes";
        e.code = "request_too_large";
        if (conn) conn->close_after_response();
        break;
      case 499:
        return HandlerResponse::Unhandled;  // the client is gone
      default:
        e.message = "HTTP " + std::to_string(res.status);
        e.type = res.status >= 500 ? "server_error" : "invalid_request_error";
    }
    send_error(res, e);
    return HandlerResponse::Handled;
  }));

  // Counted before the response goes out (the logger runs after it is written), so that a client that reads
  // /metrics once its reply has arrived sees that reply counted.
  http.set_post_routing_handler([this](const Request& req, Response& res) {
    std::string route = "other";
    for (const char* r : kRoutes)
      if (req.path == r) route = r;
    for (const PageAsset& a : page_assets())
      if (req.path == a.path) route = "/";
    counters.add(route, res.status);
  });
  http.set_logger([this](const Request& req, const Response& res) {
    if (o.log_requests)
      std::fprintf(stderr, "diskformer serve: %s %s %s %d\n", req.remote_addr.c_str(), req.method.c_str(),
                   req.path.c_str(), res.status);
  });

  http.Post("/v1/chat/completions",
            [this](const Request& req, Response& res) { generation(Endpoint::kChat, req, res); });
  http.Post("/v1/completions",
            [this](const Request& req, Response& res) { generation(Endpoint::kCompletion, req, res); });

  http.Get("/v1/models", [this](const Request&, Response& res) {
    const model::ModelSpec& spec = model.spec();
    ojson m = {{"id", o.model_name},
               {"object", "model"},
               {"created", started},
               {"owned_by", "diskformer"},
               {"meta",
                {{"arch", spec.arch},
                 {"n_ctx", model.n_ctx()},
                 {"n_vocab", spec.n_vocab},
                 {"n_layer", spec.n_layer},
                 {"n_expert", spec.n_expert},
                 {"backend", engine::backend_name(model.backend())},
                 {"slots", o.slots}}}};
    res.set_content(dump_json({{"object", "list"}, {"data", ojson::array({m})}}), "application/json");
  });

  http.Get("/health", [this](const Request&, Response& res) {
    const SchedulerStats s = sched->stats();
    res.set_content(dump_json({{"status", "ok"},
                               {"slots_idle", s.slots - s.busy},
                               {"slots_processing", s.busy},
                               {"requests_queued", s.queued}}),
                    "application/json");
  });

  http.Get("/metrics", [this](const Request&, Response& res) {
    MetricsContext c{.backend = engine::backend_name(model.backend()),
                     .n_ctx = model.n_ctx(),
                     .ram_budget = model.options().ram_budget,
                     .gpu_budget = model.backend() == engine::Backend::kCuda ? model.options().gpu.budget : std::nullopt,
                     .rss_bytes = current_rss_bytes()};
    res.set_content(prometheus_text(sched->stats(), counters.snapshot(), c), "text/plain; version=0.0.4");
  });

  // The page: its own files only (no other origin may script it, nothing is fetched from elsewhere).
  auto page = [](const PageAsset& a) {
    return [&a](const Request&, Response& res) {
      res.set_content(reinterpret_cast<const char*>(a.data), a.size, a.mime);
      res.set_header("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'");
      res.set_header("X-Content-Type-Options", "nosniff");
    };
  };
  for (const PageAsset& a : page_assets()) {
    const std::string path = a.path;
    http.Get(std::regex_replace(path, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)"), page(a));
    if (path == "/index.html") http.Get("/", page(a));
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { stop(); }

Result<std::unique_ptr<Server>> Server::create(engine::Model& model, const ServerOptions& options) {
  DF_ASSIGN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::from_gguf(model.file()));
  DF_ASSIGN(PromptBuilder prompts,
            PromptBuilder::create(model.file(), tok, options.chat_template, options.chat_template_name));
  const HttpLimits limits{.request_timeout = options.request_timeout,
                          .idle_timeout = options.idle_timeout,
                          .write_timeout = std::max(options.request_timeout, std::chrono::milliseconds(5000)),
                          // The line and the headers come on top of the body (cpp-httplib takes lines of up to
                          // 8 KiB, and any number of them).
                          .max_request_bytes = options.max_body_bytes + (64u << 10),
                          .threads = options.http_threads > 0 ? options.http_threads : 8 + 2 * int(options.slots)};
  auto impl = std::make_unique<Impl>(model, tok, options, std::move(prompts), limits);
  DF_ASSIGN(impl->sched, Scheduler::create(model, tok, {.slots = options.slots, .max_queue = options.max_queue}));
  std::random_device rd;
  char prefix[16];
  std::snprintf(prefix, sizeof prefix, "%08x-", unsigned(rd()));
  impl->id_prefix = prefix;
  impl->started = int64_t(std::time(nullptr));
  impl->routes();
  impl->port = impl->http.bind(options.host, options.port);
  if (impl->port <= 0)
    return Error{"cannot listen on " + options.host + ":" + std::to_string(options.port) +
                 " (the port is taken, or the host is not an address of this machine)"};
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

int Server::port() const { return impl_->port; }

Status Server::run() {
  const bool ok = impl_->http.serve();
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!ok && !impl_->stopped) return Error{"the listening socket failed"};
  return {};
}

void Server::stop() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.stopped) return;
    s.stopped = true;
  }
  s.sched->stop();
  {
    // Every generation has ended now; give their responses the time to say so before the connections go.
    std::unique_lock<std::mutex> lock(s.mu);
    s.cv.wait_for(lock, std::chrono::seconds(10), [&] { return s.active == 0; });
  }
  s.http.shutdown();
}

}  // namespace df::server
