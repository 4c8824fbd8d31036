// Client channels that send an "authorization" value on every call, for tests
// that talk to a coordinator with authentication on.
#ifndef TESSERA_TESTS_TESTING_GRPC_AUTH_H_
#define TESSERA_TESTS_TESTING_GRPC_AUTH_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_interceptor.h"

namespace tessera::testing {

class AuthorizationInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit AuthorizationInterceptor(std::string value) : value_(std::move(value)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", value_});
    }
    methods->Proceed();
  }

 private:
  const std::string value_;
};

class AuthorizationInterceptorFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit AuthorizationInterceptorFactory(std::string value)
      : value_(std::move(value)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new AuthorizationInterceptor(value_);
  }

 private:
  const std::string value_;
};

inline std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
BearerInterceptors(const std::string& token) {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> out;
  out.push_back(std::make_unique<AuthorizationInterceptorFactory>("Bearer " + token));
  return out;
}

// An insecure channel to `target` whose calls carry `token`.
inline std::shared_ptr<grpc::Channel> ChannelWithToken(const std::string& target,
                                                       const std::string& token) {
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, grpc::InsecureChannelCredentials(), grpc::ChannelArguments(),
      BearerInterceptors(token));
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_TESTING_GRPC_AUTH_H_
