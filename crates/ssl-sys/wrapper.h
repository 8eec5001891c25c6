/* The headers farflash-ssl-sys binds: OpenSSL 3's TLS library (ssl.h:
 * contexts, connections, TLS 1.3 external-PSK callbacks and sessions, PEM
 * session export) and the memory BIOs and error queue of libcrypto (bio.h,
 * err.h). Debian: libssl-dev. */
#include <openssl/ssl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/crypto.h>
