#!/usr/bin/env bash
# Writes a throw-away PKI for trying kvpool's TLS (and for its tests) into DIR:
#   ca.pem            the cluster's CA (ca.key its key)
#   server.pem/.key   a node's certificate: localhost and 127.0.0.1
#   client.pem/.key   a client's (and peer's) certificate, signed by ca.pem
#   rogue-ca.pem      another CA, and rogue-client.pem/.key signed by it (must be refused)
# EC P-256 keys, valid 30 days. Not for production: keys are written unencrypted.
set -euo pipefail
dir=${1:?usage: make-test-certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
days=30
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
ca() {  # name subject
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days $days -out "$1.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" 2>/dev/null
}
leaf() {  # name subject ca extensions
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
  printf '%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days $days \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca "kvpool test CA"
ca rogue-ca "rogue CA"
leaf server localhost ca "subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth,clientAuth"
leaf client kvpool-client ca "extendedKeyUsage=clientAuth"
leaf rogue-client rogue-client rogue-ca "extendedKeyUsage=clientAuth"
chmod 600 ./*.key
echo "$dir: ca.pem server.pem/.key client.pem/.key rogue-ca.pem rogue-client.pem/.key"
