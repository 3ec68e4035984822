# Certificates and kubeconfigs of the test bed, made with openssl and kubectl.
# shellcheck shell=bash

# P-256 keys: RSA keys take seconds each on a busy two-core machine.
NEW_KEY=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1)

# issue NAME CN [O] [SANS]: a key and a certificate signed by the test bed's CA.
issue() {
  local name=$1 cn=$2 org=${3:-} sans=${4:-} subj="/CN=$2" ext
  [ -n "$org" ] && subj="/O=$org$subj"
  ext="$PKI/$name.ext"
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature"
    echo "extendedKeyUsage=clientAuth,serverAuth"
    [ -n "$sans" ] && echo "subjectAltName=$sans"
  } > "$ext"
  openssl req -new "${NEW_KEY[@]}" -nodes -keyout "$PKI/$name.key" -subj "$subj" \
    -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -CAcreateserial -days 30 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$ext"
}

# kubeconfig NAME: $KUBE_RUN/NAME.kubeconfig authenticating with the NAME certificate.
kubeconfig() {
  local file="$KUBE_RUN/$1.kubeconfig" k=("$KUBE_BIN/kubectl" config --kubeconfig "$KUBE_RUN/$1.kubeconfig")
  "${k[@]}" set-cluster moldau --server="https://$NODE_IP:$APISERVER_PORT" \
    --certificate-authority="$PKI/ca.crt" --embed-certs=true >/dev/null
  "${k[@]}" set-credentials "$1" --client-certificate="$PKI/$1.crt" \
    --client-key="$PKI/$1.key" --embed-certs=true >/dev/null
  "${k[@]}" set-context moldau --cluster=moldau --user="$1" >/dev/null
  "${k[@]}" use-context moldau >/dev/null
  chmod 600 "$file"
}

make_pki() {
  PKI="$KUBE_RUN/pki"; mkdir -p "$PKI"
  openssl req -x509 "${NEW_KEY[@]}" -nodes -days 30 -subj "/CN=moldau-kube-ca" \
    -keyout "$PKI/ca.key" -out "$PKI/ca.crt" 2>/dev/null
  openssl ecparam -name prime256v1 -genkey -noout -out "$PKI/sa.key"
  openssl ec -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  issue apiserver kube-apiserver "" "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:$NODE_IP,IP:$KUBERNETES_SERVICE_IP,IP:127.0.0.1"
  issue apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  issue admin moldau-admin system:masters
  issue kubelet "system:node:$NODE_NAME" system:nodes "DNS:$NODE_NAME,IP:$NODE_IP"
  issue kube-proxy system:kube-proxy
  issue controller-manager system:kube-controller-manager
  issue scheduler system:kube-scheduler
  issue coredns moldau:coredns
  local who; for who in admin kubelet kube-proxy controller-manager scheduler coredns; do
    kubeconfig "$who"
  done
}
