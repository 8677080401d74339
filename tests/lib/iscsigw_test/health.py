"""grpc.health.v1.Health/Check as the kubelet's gRPC probe asks it, over plaintext; the messages
are encoded by hand (HealthCheckRequest and HealthCheckResponse have field 1 only), so only
python3-grpcio is needed."""
import grpc

SERVING, NOT_SERVING = 1, 2
LIVENESS = "iscsigw.liveness"
READINESS = "iscsigw.readiness"


def health(address, service=""):
    """The status Health/Check answers for SERVICE ("" is the server as a whole)."""
    name = service.encode()
    request = (b"\x0a" + bytes([len(name)]) + name) if name else b""
    with grpc.insecure_channel(address) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                    request_serializer=lambda m: m,
                                    response_deserializer=lambda m: m)
        response = check(request, timeout=5)
    return response[1] if response[:1] == b"\x08" and len(response) > 1 else 0
