"""A loopback TCP relay for tests that stand between a client and kvpoold: each accepted
client gets its own connection to the target and two threads, upstream(client, server)
and downstream(server, client). By default both forward bytes as they come (seen(data)
is called with each piece); subclasses override them to record, delay or corrupt."""
import socket
import threading


class TcpRelay:
    def __init__(self, target):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            threading.Thread(target=self.upstream, args=(client, server), daemon=True).start()
            threading.Thread(target=self.downstream, args=(server, client), daemon=True).start()

    def seen(self, data):
        pass

    def forward(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                self.seen(data)
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def upstream(self, client, server):
        self.forward(client, server)

    def downstream(self, server, client):
        self.forward(server, client)

    def close(self):
        self.listener.close()
