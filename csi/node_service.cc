#include "csi/node_service.h"

namespace iscsigw::csi {

NodeService::NodeService(NodeOptions options)
    : options_(std::move(options)),
      exec_(options_.host_exec ? options_.host_exec : MakeHostExec(options_.host_exec_mode)) {}

}  // namespace iscsigw::csi
