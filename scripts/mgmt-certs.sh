#!/usr/bin/env bash
# Certificates for farflash's network management endpoint (docs/management.md),
# made with the openssl CLI alone:
#
#   mgmt-certs.sh ca     DIR                 DIR/ca.crt, DIR/ca.key (a new CA; keep ca.key offline)
#   mgmt-certs.sh server DIR NAME SAN        DIR/NAME.crt, DIR/NAME.key for `serve --rpc-cert/--rpc-key`
#                                            (SAN: subjectAltName, e.g. IP:10.0.0.5,DNS:target-a)
#   mgmt-certs.sh client DIR NAME            DIR/NAME.crt, DIR/NAME.key for `ctl --rpc-cert/--rpc-key`
#                                            or the CSI controller (NAME becomes its CN)
#
# Keys are EC P-256 (PKCS#8), mode 0600; certificates last DAYS (default 825).
set -euo pipefail

days=${DAYS:-825}
usage() { echo "usage: $0 ca DIR | server DIR NAME SAN | client DIR NAME" >&2; exit 2; }

key() { (umask 077 && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"); }

leaf() { # DIR NAME EXTENSIONS
    local dir=$1 name=$2 ext=$3
    [[ -f $dir/ca.crt && -f $dir/ca.key ]] || { echo "$dir/ca.crt and ca.key: make the CA first ($0 ca $dir)" >&2; exit 1; }
    key "$dir/$name.key"
    openssl req -new -key "$dir/$name.key" -subj "/CN=$name" -out "$dir/$name.csr"
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
        -CAcreateserial -days "$days" -sha256 -extfile <(printf '%s\n' "$ext") -out "$dir/$name.crt" 2>/dev/null
    rm -f "$dir/$name.csr"
}

[[ $# -ge 2 ]] || usage
dir=$2
mkdir -p "$dir"
case $1 in
ca)
    key "$dir/ca.key"
    openssl req -x509 -new -key "$dir/ca.key" -subj "/CN=farflash management CA" -days "$days" \
        -sha256 -out "$dir/ca.crt"
    ;;
server)
    [[ $# -eq 4 ]] || usage
    leaf "$dir" "$3" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=$4"
    ;;
client)
    [[ $# -eq 3 ]] || usage
    leaf "$dir" "$3" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
    ;;
*) usage ;;
esac
