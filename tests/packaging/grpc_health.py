"""What the kubelet's gRPC probe does: grpc.health.v1.Health/Check for SERVICE (the chart's
probes ask iscsigw.liveness and iscsigw.readiness; "", the server as a whole, when omitted), over
plaintext. Exit 0 when the answer is SERVING.

  /usr/bin/python3 grpc_health.py HOST:PORT [SERVICE]

The messages are encoded by hand (HealthCheckRequest: field 1 string; HealthCheckResponse:
field 1 enum, SERVING = 1), so only python3-grpcio is needed, no generated code.
"""
import sys

import grpc


def main():
    target = sys.argv[1]
    service = sys.argv[2].encode() if len(sys.argv) > 2 else b""
    request = (b"\x0a" + bytes([len(service)]) + service) if service else b""
    with grpc.insecure_channel(target) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                    request_serializer=lambda m: m,
                                    response_deserializer=lambda m: m)
        try:
            response = check(request, timeout=3)
        except grpc.RpcError as e:
            print("health check failed: %s" % e.code().name, file=sys.stderr)
            return 1
    status = response[1] if response[:1] == b"\x08" and len(response) > 1 else 0
    names = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
    print(names.get(status, str(status)))
    return 0 if status == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
