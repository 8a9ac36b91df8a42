package k8s_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// pendingEnv are variables the manifests set for a flag another branch is
// adding to the binaries (issue 19: gRPC TLS). Until the binary reads one,
// setting it is logged instead of failing; once it does, it is checked as
// every other variable is.
var pendingEnv = map[string]string{
	"RANGECAST_TLS_CERT": "coordinator --tls-cert, issue 19",
	"RANGECAST_TLS_KEY":  "coordinator --tls-key, issue 19",
	// The coordinator renders previews and sends test copies with the
	// workers' settings (broadcasts preview/test, issue 19).
	"RANGECAST_SMTP_URL":   "coordinator --smtp-url, issue 19",
	"RANGECAST_PUBLIC_URL": "coordinator --public-url, issue 19",
}

// certificate and issuer mirror the cert-manager.io/v1 fields these
// manifests use; strict decoding fails on any other (a misspelt field
// cert-manager would reject or ignore).
type certificate struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		SecretName  string   `json:"secretName"`
		CommonName  string   `json:"commonName,omitempty"`
		DNSNames    []string `json:"dnsNames,omitempty"`
		IsCA        bool     `json:"isCA,omitempty"`
		Duration    string   `json:"duration,omitempty"`
		RenewBefore string   `json:"renewBefore,omitempty"`
		Usages      []string `json:"usages,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef struct {
			Name  string `json:"name"`
			Kind  string `json:"kind,omitempty"`
			Group string `json:"group,omitempty"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

type issuer struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

// natsChartExporterPort is the name of the exporter's container port in
// the NATS Helm chart (files/stateful-set/prom-exporter-container.yaml);
// overlays/dev's NATS sidecar uses the same name.
const natsChartExporterPort = "prom-metrics"

// pod is a workload's pod template, named for messages.
type pod struct {
	what string
	tmpl corev1.PodTemplateSpec
}

func (b *bundle) pods() []pod {
	var out []pod
	for name, d := range b.deployments {
		out = append(out, pod{"Deployment " + name, d.Spec.Template})
	}
	for name, s := range b.statefulSets {
		out = append(out, pod{"StatefulSet " + name, s.Spec.Template})
	}
	return out
}

func namedPort(tmpl corev1.PodTemplateSpec, name string) int32 {
	for _, c := range tmpl.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
	}
	return 0
}

// checkPodMonitors: where the build has PodMonitors, they cover the
// coordinators, the page workers and NATS; each selects pods of the build
// (or, for NATS installed by Helm in production, the chart's pods), every
// endpoint names a port those pods have, Prometheus's namespace may reach
// it, and the alerts come along.
func checkPodMonitors(t *testing.T, b *bundle) {
	wantMonitoring := strings.HasSuffix(b.dir, "production") || strings.HasSuffix(b.dir, "dev-monitoring")
	if len(b.podMonitors) == 0 {
		if wantMonitoring {
			t.Errorf("%s: no PodMonitors (components/monitoring)", b.dir)
		}
		return
	}
	if len(b.rules) != 1 {
		t.Errorf("%s: %d PrometheusRules, want deploy/prometheus/rules.yaml with the PodMonitors", b.dir, len(b.rules))
	}
	covered := map[string]bool{}
	for _, pm := range b.podMonitors {
		what := "PodMonitor " + pm.Name
		if ns := pm.Spec.NamespaceSelector; ns.Any || (len(ns.MatchNames) > 0 && !slices.Equal(ns.MatchNames, []string{namespace})) {
			t.Errorf("%s: namespaceSelector %+v; leave it empty (its own namespace)", what, ns)
		}
		sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Errorf("%s: selector %v: %v (an empty one selects every pod)", what, pm.Spec.Selector, err)
			continue
		}
		if len(pm.Spec.PodMetricsEndpoints) == 0 {
			t.Errorf("%s: no podMetricsEndpoints", what)
		}
		var matched []pod
		for _, p := range b.pods() {
			if sel.Matches(labels.Set(p.tmpl.Labels)) {
				matched = append(matched, p)
			}
		}
		for _, ep := range pm.Spec.PodMetricsEndpoints {
			if ep.Port == nil || *ep.Port == "" {
				t.Errorf("%s: endpoint without a port name", what)
				continue
			}
			if ep.Path != "" && ep.Path != "/metrics" {
				t.Errorf("%s: path %s; the binaries serve /metrics", what, ep.Path)
			}
			for _, p := range matched {
				port := namedPort(p.tmpl, *ep.Port)
				if port == 0 {
					t.Errorf("%s: %s has no container port named %s", what, p.what, *ep.Port)
					continue
				}
				if anywhere, from := ingressAllows(b, p.tmpl.Labels, port); !anywhere && !slices.ContainsFunc(from, func(l map[string]string) bool { return l[monitoringLabel] == "true" }) {
					t.Errorf("%s: no NetworkPolicy lets namespaces labelled %s=true reach %s port %d", what, monitoringLabel, p.what, port)
				}
			}
		}
		for _, p := range matched {
			switch {
			case p.tmpl.Labels["app.kubernetes.io/name"] == "nats":
				covered["nats"] = true
			case p.tmpl.Labels["app.kubernetes.io/name"] == "rangecast":
				covered[p.tmpl.Labels["app.kubernetes.io/component"]] = true
			}
		}
		if len(matched) == 0 {
			if !natsFromHelm(t, b, pm) {
				t.Errorf("%s: selector %v matches no pod of the build", what, pm.Spec.Selector.MatchLabels)
				continue
			}
			covered["nats"] = true
		}
	}
	for _, want := range []string{"coordinator", "pageworker", "nats"} {
		if !covered[want] {
			t.Errorf("%s: no PodMonitor scrapes the %s pods", b.dir, want)
		}
	}
}

// natsFromHelm: in production NATS is the Helm release "nats"
// (nats-values.yaml), not part of the build. pm then must select the
// chart's pod labels and scrape the exporter the values turn on.
func natsFromHelm(t *testing.T, b *bundle, pm *monitoringv1.PodMonitor) bool {
	if !strings.HasSuffix(b.dir, "production") {
		return false
	}
	chartPod := labels.Set{"app.kubernetes.io/name": "nats", "app.kubernetes.io/instance": "nats", "app.kubernetes.io/component": "nats"}
	sel, _ := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
	if !sel.Matches(chartPod) {
		return false
	}
	raw, err := os.ReadFile("overlays/production/nats-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal(raw, &vals); err != nil {
		t.Fatal(err)
	}
	if get(vals, "promExporter", "enabled") != true {
		t.Errorf("PodMonitor %s scrapes NATS's exporter, but nats-values.yaml does not set promExporter.enabled", pm.Name)
	}
	port, _ := get(vals, "promExporter", "port").(float64)
	for _, ep := range pm.Spec.PodMetricsEndpoints {
		if ep.Port == nil || *ep.Port != natsChartExporterPort {
			t.Errorf("PodMonitor %s: port %v, want the chart's exporter port %s", pm.Name, ep.Port, natsChartExporterPort)
		}
	}
	natsPod := map[string]string{"app.kubernetes.io/name": "nats"}
	if anywhere, from := ingressAllows(b, natsPod, int32(port)); !anywhere && !slices.ContainsFunc(from, func(l map[string]string) bool { return l[monitoringLabel] == "true" }) {
		t.Errorf("no NetworkPolicy lets the monitoring namespace reach NATS's exporter port %v", port)
	}
	return true
}

// checkTLS: where the coordinator serves gRPC over TLS, its certificate and
// key are files of one Secret of the cert-manager shape (tls.crt, tls.key)
// mounted whole; a Certificate in the build that writes that Secret names
// the coordinator Service and comes from an Issuer that exists. Production
// serves TLS; the dev overlays stay plaintext (no cert-manager needed).
func checkTLS(t *testing.T, b *bundle) {
	d, ok := b.deployments["coordinator"]
	if !ok {
		return
	}
	env := b.effectiveEnv(t, "Deployment coordinator", d.Spec.Template.Spec.Containers[0])
	cert, key := env["RANGECAST_TLS_CERT"], env["RANGECAST_TLS_KEY"]
	dev := strings.HasPrefix(b.dir, "overlays/dev")
	switch {
	case cert == "" && key == "":
		if strings.HasSuffix(b.dir, "production") {
			t.Error("overlays/production: the coordinator serves gRPC in plaintext; bearer tokens would cross the network in the clear (components/tls)")
		}
		return
	case dev:
		t.Errorf("%s: sets RANGECAST_TLS_CERT; the dev overlays stay plaintext so they work without cert-manager", b.dir)
	case cert == "" || key == "":
		t.Errorf("Deployment coordinator: RANGECAST_TLS_CERT %q and RANGECAST_TLS_KEY %q: set both", cert, key)
		return
	}
	certSecret, certKey, vol := secretFile(t, d, cert)
	keySecret, keyKey, _ := secretFile(t, d, key)
	if certSecret == "" || keySecret == "" {
		return
	}
	if certSecret != keySecret || certKey != corev1.TLSCertKey || keyKey != corev1.TLSPrivateKeyKey {
		t.Errorf("Deployment coordinator: certificate %s/%s and key %s/%s; want one Secret with keys %s and %s (what cert-manager and kubectl create secret tls write)",
			certSecret, certKey, keySecret, keyKey, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	if vol != nil && vol.Optional != nil && *vol.Optional {
		t.Errorf("Deployment coordinator: TLS Secret %s is optional; without it the coordinator cannot serve", certSecret)
	}
	var issued *certificate
	for _, c := range b.certificates {
		if c.Spec.SecretName == certSecret {
			issued = c
		}
	}
	if issued == nil {
		if strings.HasSuffix(b.dir, "production") {
			t.Errorf("overlays/production: no cert-manager Certificate writes the Secret %s", certSecret)
		}
		return
	}
	svc := "coordinator." + namespace + ".svc"
	if !slices.Contains(issued.Spec.DNSNames, svc) {
		t.Errorf("Certificate %s: dnsNames %v lack %s, the name in-cluster clients dial", issued.Metadata.Name, issued.Spec.DNSNames, svc)
	}
	if issued.Spec.IsCA {
		t.Errorf("Certificate %s: the serving certificate must not be a CA", issued.Metadata.Name)
	}
	checkIssuer(t, b, issued)
}

// checkIssuer: c's issuer is in the build (a namespaced Issuer) and, when
// it is a CA issuer, its CA Secret is written by a CA Certificate that is
// in turn issued by an issuer of the build. ClusterIssuers live outside.
func checkIssuer(t *testing.T, b *bundle, c *certificate) {
	for depth := 0; depth < 4; depth++ {
		ref := c.Spec.IssuerRef
		if ref.Kind == "ClusterIssuer" {
			return
		}
		if ref.Kind != "" && ref.Kind != "Issuer" {
			t.Errorf("Certificate %s: issuerRef kind %q", c.Metadata.Name, ref.Kind)
			return
		}
		is, ok := b.issuers[ref.Name]
		if !ok {
			t.Errorf("Certificate %s: Issuer %s not in the build", c.Metadata.Name, ref.Name)
			return
		}
		if is.Spec.CA == nil {
			if is.Spec.SelfSigned == nil {
				t.Errorf("Issuer %s: neither ca nor selfSigned", is.Metadata.Name)
			}
			return
		}
		var ca *certificate
		for _, cc := range b.certificates {
			if cc.Spec.SecretName == is.Spec.CA.SecretName {
				ca = cc
			}
		}
		if ca == nil || !ca.Spec.IsCA {
			t.Errorf("Issuer %s: CA Secret %s is written by no CA Certificate of the build", is.Metadata.Name, is.Spec.CA.SecretName)
			return
		}
		c = ca
	}
	t.Errorf("Certificate %s: issuer chain too long", c.Metadata.Name)
}
