#include "common/rpc/rpc_server.h"

#include <grpc/grpc_security.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/client_interceptor.h>

#include "common/util/bearer_token.h"
#include "common/util/check.h"
#include "common/util/strings.h"

namespace tandem::rpc {

namespace {
constexpr int kMaxMessageBytes = 64 << 20;

// Adds `authorization: Bearer <key>` to every call on a channel.
class ApiKeyInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit ApiKeyInterceptor(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class ApiKeyInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ApiKeyInterceptorFactory(const std::string& key) : header_(StrCat("Bearer ", key)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new ApiKeyInterceptor(&header_);
  }

 private:
  const std::string header_;  // lives as long as the channel that owns the factory
};

// Calls every probe may make without the key: health checks and reflection.
bool IsOpenMethod(std::string_view path) {
  return path.starts_with("/grpc.health.v1.Health/") || path.starts_with("/grpc.reflection.");
}

std::string_view View(const grpc_slice& s) {
  return {reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(s)), GRPC_SLICE_LENGTH(s)};
}

// gRPC core's auth-metadata processor: runs on every call before it is matched to a
// handler, sees the request headers (`:path` included) and answers at once.
void CheckApiKey(void* state, grpc_auth_context*, const grpc_metadata* md, size_t n,
                 grpc_process_auth_metadata_done_cb done, void* user_data) {
  const std::string& key = *static_cast<const std::string*>(state);
  std::string_view path, authorization;
  for (size_t i = 0; i < n; ++i) {
    const std::string_view name = View(md[i].key);
    if (name == ":path") path = View(md[i].value);
    if (name == "authorization") authorization = View(md[i].value);
  }
  if (IsOpenMethod(path) || BearerTokenMatches(authorization, key)) {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
  } else {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_UNAUTHENTICATED,
         "missing or invalid API key (metadata authorization: Bearer <key>)");
  }
}

// Server credentials (plaintext or TLS, from gRPC core) with the API key's processor.
// grpc++'s InsecureServerCredentials() refuses a processor, hence this wrapper.
class KeyedServerCredentials final : public grpc::ServerCredentials {
 public:
  // Takes `creds`.
  KeyedServerCredentials(grpc_server_credentials* creds, const std::string& api_key)
      : creds_(creds) {
    if (api_key.empty()) return;
    grpc_server_credentials_set_auth_metadata_processor(
        creds_, {&CheckApiKey, [](void* s) { delete static_cast<std::string*>(s); },
                 new std::string(api_key)});
  }
  ~KeyedServerCredentials() override { grpc_server_credentials_release(creds_); }

  // The processor is the key's, set at construction; a second one would silently lose
  // to it, so none may be given.
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {
    TANDEM_CHECK(false);
  }

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }

  grpc_server_credentials* const creds_;
};

grpc::ChannelArguments ChannelArgs() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return args;
}

std::shared_ptr<grpc::Channel> CreateChannel(const std::string& address,
                                             const std::shared_ptr<grpc::ChannelCredentials>& creds,
                                             grpc::ChannelArguments args,
                                             const std::string& api_key) {
  if (api_key.empty()) return grpc::CreateCustomChannel(address, creds, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<ApiKeyInterceptorFactory>(api_key));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, creds, args,
                                                                 std::move(factories));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RpcServer>> RpcServer::Start(
    const std::string& address, const std::vector<grpc::Service*>& services,
    const std::vector<std::string>& ready_services, const TlsFiles& tls,
    const std::string& api_key) {
  if (auto st = tls.CheckServer(); !st.ok()) return st;
  grpc_server_credentials* core_creds = nullptr;
  if (!tls.enabled()) {
    core_creds = grpc_insecure_server_credentials_create();
  } else {
    auto cert = ReadPemFile("--tls-cert", tls.cert);
    if (!cert.ok()) return cert.status();
    auto key = ReadPemFile("--tls-key", tls.key);
    if (!key.ok()) return key.status();
    std::string ca;
    if (!tls.client_ca.empty()) {
      auto read = ReadPemFile("--tls-client-ca", tls.client_ca);
      if (!read.ok()) return read.status();
      ca = *std::move(read);
    }
    grpc_ssl_pem_key_cert_pair pair{key->c_str(), cert->c_str()};
    core_creds = grpc_ssl_server_credentials_create_ex(
        ca.empty() ? nullptr : ca.c_str(), &pair, 1,
        ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                   : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY,
        nullptr);
    if (core_creds == nullptr) return absl::InvalidArgumentError("--tls-cert: unusable");
  }
  auto creds = std::make_shared<KeyedServerCredentials>(core_creds, api_key);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<RpcServer> s(new RpcServer());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, creds, &s->port_);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // Clients ping every second (MakeChannel) so a dead peer shows within seconds.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  for (grpc::Service* service : services) builder.RegisterService(service);
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(StrCat("cannot listen on ", address));
  }
  s->ready_services_ = ready_services;
  s->SetReady(false);
  return s;
}

void RpcServer::SetReady(bool ready) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  for (const std::string& name : ready_services_) health->SetServingStatus(name, ready);
}

void RpcServer::Shutdown(std::chrono::milliseconds grace) {
  if (server_ == nullptr) return;
  server_->GetHealthCheckService()->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + grace);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeSecureChannel(const std::string& address,
                                                                 const ChannelSecurity& sec) {
  if (sec.tls_ca.empty()) {
    if (!sec.tls_cert.empty() || !sec.tls_key.empty()) {
      return absl::InvalidArgumentError("--tls-ca: required with a client certificate");
    }
    return MakeChannel(address, sec.api_key);
  }
  grpc::SslCredentialsOptions ssl;
  auto ca = ReadPemFile("--tls-ca", sec.tls_ca);
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *std::move(ca);
  if (!sec.tls_cert.empty() || !sec.tls_key.empty()) {
    auto cert = ReadPemFile("--tls-cert", sec.tls_cert);
    if (!cert.ok()) return cert.status();
    auto key = ReadPemFile("--tls-key", sec.tls_key);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  grpc::ChannelArguments args = ChannelArgs();
  if (!sec.tls_server_name.empty()) args.SetSslTargetNameOverride(sec.tls_server_name);
  return CreateChannel(address, grpc::SslCredentials(ssl), std::move(args), sec.api_key);
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, const std::string& api_key) {
  return CreateChannel(address, grpc::InsecureChannelCredentials(), ChannelArgs(), api_key);
}

}  // namespace tandem::rpc
