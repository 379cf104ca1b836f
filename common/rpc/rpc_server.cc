#include "common/rpc/rpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/client_interceptor.h>

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
    const std::vector<std::string>& ready_services, const TlsFiles& tls) {
  if (auto st = tls.CheckServer(); !st.ok()) return st;
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (tls.enabled()) {
    grpc::SslServerCredentialsOptions ssl(
        tls.client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    auto cert = ReadPemFile("--tls-cert", tls.cert);
    if (!cert.ok()) return cert.status();
    auto key = ReadPemFile("--tls-key", tls.key);
    if (!key.ok()) return key.status();
    pair.cert_chain = *std::move(cert);
    pair.private_key = *std::move(key);
    ssl.pem_key_cert_pairs.push_back(std::move(pair));
    if (!tls.client_ca.empty()) {
      auto ca = ReadPemFile("--tls-client-ca", tls.client_ca);
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *std::move(ca);
    }
    creds = grpc::SslServerCredentials(ssl);
  }
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
