// Package k8s_test builds every kustomization under deploy/k8s with krusty
// (no cluster, no network), decodes every object strictly into its
// k8s.io/api type (the Prometheus Operator's for PodMonitor and
// PrometheusRule, local mirrors for cert-manager's), and checks the
// manifests against the binaries: env vars they read, ports they listen on,
// probe paths they serve, the Secrets they mount, the pods the PodMonitors
// scrape.
package k8s_test

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/rangecast/rangecast/internal/bus"
	"github.com/rangecast/rangecast/internal/cli"
	"github.com/rangecast/rangecast/internal/server"
)

const namespace = "rangecast"

// kinds maps apiVersion/kind to a constructor of the typed object it must
// decode into. Anything else (but a ScaledObject) fails the test.
var kinds = map[string]func() any{
	"v1/Namespace":                           func() any { return &corev1.Namespace{} },
	"v1/ConfigMap":                           func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                              func() any { return &corev1.Secret{} },
	"v1/Service":                             func() any { return &corev1.Service{} },
	"v1/PersistentVolumeClaim":               func() any { return &corev1.PersistentVolumeClaim{} },
	"apps/v1/Deployment":                     func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":                    func() any { return &appsv1.StatefulSet{} },
	"policy/v1/PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"networking.k8s.io/v1/NetworkPolicy":     func() any { return &networkingv1.NetworkPolicy{} },
	// The Prometheus Operator's own Go types (its API module).
	"monitoring.coreos.com/v1/PodMonitor":     func() any { return &monitoringv1.PodMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule": func() any { return &monitoringv1.PrometheusRule{} },
	// cert-manager's module is large; monitoring_tls_test.go mirrors the
	// fields these manifests use, decoded as strictly.
	"cert-manager.io/v1/Certificate": func() any { return &certificate{} },
	"cert-manager.io/v1/Issuer":      func() any { return &issuer{} },
}

// bundle is one kustomization's output, decoded.
type bundle struct {
	dir          string
	deployments  map[string]*appsv1.Deployment
	statefulSets map[string]*appsv1.StatefulSet
	services     map[string]*corev1.Service
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	pdbs         []*policyv1.PodDisruptionBudget
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	pvcs         map[string]*corev1.PersistentVolumeClaim
	scaled       []map[string]any
	clusters     []map[string]any
	netpols      []*networkingv1.NetworkPolicy
	podMonitors  []*monitoringv1.PodMonitor
	rules        []*monitoringv1.PrometheusRule
	certificates []*certificate
	issuers      map[string]*issuer
	namespaces   []string
}

func kustomizations(t *testing.T) []string {
	t.Helper()
	dirs := []string{"base"}
	overlays, err := filepath.Glob("overlays/*/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range overlays {
		dirs = append(dirs, filepath.Dir(o))
	}
	// Components (components/tls, components/monitoring) are not built on
	// their own: overlays/production and overlays/dev-monitoring use them.
	for _, want := range []string{"overlays/dev", "overlays/dev-monitoring", "overlays/hpa", "overlays/keda", "overlays/production"} {
		if !slices.Contains(dirs, want) {
			t.Errorf("missing kustomization %s", want)
		}
	}
	return dirs
}

func build(t *testing.T, dir string) *bundle {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	b := &bundle{
		dir:         dir,
		deployments: map[string]*appsv1.Deployment{}, statefulSets: map[string]*appsv1.StatefulSet{},
		services: map[string]*corev1.Service{}, configMaps: map[string]*corev1.ConfigMap{},
		secrets: map[string]*corev1.Secret{}, pvcs: map[string]*corev1.PersistentVolumeClaim{},
		issuers: map[string]*issuer{},
	}
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		gvk := r.GetGvk()
		key := gvk.ApiVersion() + "/" + gvk.Kind
		what := fmt.Sprintf("%s: %s %s", dir, key, r.GetName())
		if gvk.Kind != "Namespace" && r.GetNamespace() != namespace {
			t.Errorf("%s: namespace %q, want %q", what, r.GetNamespace(), namespace)
		}
		if key == "keda.sh/v1alpha1/ScaledObject" || key == "postgresql.cnpg.io/v1/Cluster" {
			var obj map[string]any
			if err := yaml.UnmarshalStrict(y, &obj); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if gvk.Kind == "Cluster" {
				b.clusters = append(b.clusters, obj)
			} else {
				b.scaled = append(b.scaled, obj)
			}
			continue
		}
		mk, ok := kinds[key]
		if !ok {
			t.Errorf("%s: kind not checked by this test; add it to kinds", what)
			continue
		}
		obj := mk()
		if err := yaml.UnmarshalStrict(y, obj); err != nil {
			t.Errorf("%s: strict decode: %v", what, err)
			continue
		}
		switch o := obj.(type) {
		case *corev1.Namespace:
			b.namespaces = append(b.namespaces, o.Name)
		case *corev1.ConfigMap:
			b.configMaps[o.Name] = o
		case *corev1.Secret:
			b.secrets[o.Name] = o
		case *corev1.Service:
			b.services[o.Name] = o
		case *corev1.PersistentVolumeClaim:
			b.pvcs[o.Name] = o
		case *appsv1.Deployment:
			b.deployments[o.Name] = o
		case *appsv1.StatefulSet:
			b.statefulSets[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			b.pdbs = append(b.pdbs, o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			b.hpas = append(b.hpas, o)
		case *networkingv1.NetworkPolicy:
			b.netpols = append(b.netpols, o)
		case *monitoringv1.PodMonitor:
			b.podMonitors = append(b.podMonitors, o)
		case *monitoringv1.PrometheusRule:
			b.rules = append(b.rules, o)
		case *certificate:
			b.certificates = append(b.certificates, o)
		case *issuer:
			b.issuers[o.Metadata.Name] = o
		}
	}
	if !slices.Equal(b.namespaces, []string{namespace}) {
		t.Errorf("%s: namespaces %v, want [%s]", dir, b.namespaces, namespace)
	}
	return b
}

// envRE finds the variable a flag's help names: "… (env RANGECAST_X)".
var envRE = regexp.MustCompile(`\(env (RANGECAST_[A-Z0-9_]+)\)`)

// binaryEnv is the set of variables cmd reads, from its flags' help.
func binaryEnv(t *testing.T, cmd *cobra.Command) map[string]bool {
	t.Helper()
	vars := map[string]bool{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		for _, m := range envRE.FindAllStringSubmatch(f.Usage, -1) {
			vars[m[1]] = true
		}
	})
	if len(vars) == 0 {
		t.Fatalf("%s: no (env …) in any flag's help", cmd.Name())
	}
	return vars
}

// effectiveEnv resolves a container's environment: envFrom ConfigMaps and
// Secrets (which must exist in the bundle, unless optional), then env.
// Values from secretKeyRef are "<secret>".
func (b *bundle) effectiveEnv(t *testing.T, what string, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, ok := b.configMaps[from.ConfigMapRef.Name]
			if !ok {
				t.Errorf("%s: envFrom ConfigMap %q not in the build", what, from.ConfigMapRef.Name)
				continue
			}
			for k, v := range cm.Data {
				env[from.Prefix+k] = v
			}
		case from.SecretRef != nil:
			s, ok := b.secrets[from.SecretRef.Name]
			if !ok {
				t.Errorf("%s: envFrom Secret %q not in the build", what, from.SecretRef.Name)
				continue
			}
			for k := range s.StringData {
				env[from.Prefix+k] = "<secret>"
			}
			for k := range s.Data {
				env[from.Prefix+k] = "<secret>"
			}
		}
	}
	seen := map[string]bool{}
	for _, e := range c.Env {
		// Kubernetes keeps the last of two entries of one name, so a
		// second entry silently replaces the first (an optional secret
		// key made required by a copy below it).
		if seen[e.Name] {
			t.Errorf("%s: env %s is listed twice", what, e.Name)
		}
		seen[e.Name] = true
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, ok := b.secrets[ref.Name]
			_, inString := s.StringData[ref.Key]
			_, inData := s.Data[ref.Key]
			if !ok || !(inString || inData) {
				if ref.Optional != nil && *ref.Optional {
					continue // unset until the operator adds the key
				}
				t.Errorf("%s: env %s: Secret %s key %s not in the build", what, e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = "<secret>"
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			env[e.Name] = b.configMaps[ref.Name].Data[ref.Key]
		default:
			env[e.Name] = "<field>"
		}
	}
	return env
}

// port returns the port of a host:port listen address that is reachable from
// outside the pod (0.0.0.0, :: or empty host).
func port(t *testing.T, what, addr string) int32 {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s: address %q: %v", what, addr, err)
		return 0
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("%s: address %q listens on %s only; use 0.0.0.0 in a pod", what, addr, host)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Errorf("%s: address %q: %v", what, addr, err)
	}
	return int32(n)
}

// containerPort resolves a probe's or Service's port (number or name).
func containerPort(c corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return -1
}

type binary struct {
	name     string
	cmd      *cobra.Command
	required []string
	// addrs are the variables that hold listen addresses.
	addrs []string
	// envOnly are variables read from the environment alone, with no
	// flag (secrets, kept out of --help and the process list).
	envOnly []string
}

func binaries() []binary {
	return []binary{
		{"coordinator", cli.Coordinator(),
			[]string{"RANGECAST_DATABASE_URL", "RANGECAST_NATS_URL", "RANGECAST_METRICS_ADDR", "RANGECAST_GRPC_ADDR", "RANGECAST_HTTP_ADDR", "RANGECAST_UNSUBSCRIBE_KEYS"},
			[]string{"RANGECAST_GRPC_ADDR", "RANGECAST_HTTP_ADDR", "RANGECAST_METRICS_ADDR"},
			[]string{server.EnvWebhookSecret, server.EnvMailgunKey, server.EnvResendSecret}},
		{"pageworker", cli.PageWorker(),
			[]string{"RANGECAST_DATABASE_URL", "RANGECAST_NATS_URL", "RANGECAST_METRICS_ADDR", "RANGECAST_SMTP_URL", "RANGECAST_PUBLIC_URL", "RANGECAST_UNSUBSCRIBE_KEYS"},
			[]string{"RANGECAST_METRICS_ADDR"}, nil},
	}
}

func TestManifests(t *testing.T) {
	for _, dir := range kustomizations(t) {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			b := build(t, dir)
			for _, bin := range binaries() {
				checkBinary(t, b, bin)
			}
			checkServices(t, b)
			checkPDBs(t, b)
			checkAutoscaling(t, b)
			checkNetworkPolicies(t, b)
			checkPodMonitors(t, b)
			checkTLS(t, b)
			if strings.HasPrefix(dir, "overlays/dev") {
				checkDev(t, b)
			}
			if strings.HasSuffix(dir, "production") {
				checkProduction(t, b)
			}
		})
	}
}

func checkBinary(t *testing.T, b *bundle, bin binary) {
	d, ok := b.deployments[bin.name]
	if !ok {
		t.Fatalf("no Deployment %s", bin.name)
	}
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 || spec.Containers[0].Name != bin.name {
		t.Fatalf("Deployment %s: want one container named %s", bin.name, bin.name)
	}
	c := spec.Containers[0]
	what := "Deployment " + bin.name
	if !strings.Contains(c.Image, "rangecast/"+bin.name) {
		t.Errorf("%s: image %q is not the %s image", what, c.Image, bin.name)
	}

	// Every variable set is one the binary reads; the needed ones are set.
	reads := binaryEnv(t, bin.cmd)
	for _, name := range bin.envOnly {
		reads[name] = true
	}
	env := b.effectiveEnv(t, what, c)
	for name := range env {
		if !reads[name] {
			if by, ok := pendingEnv[name]; ok {
				t.Logf("%s: sets %s, which %s does not read yet (%s)", what, name, bin.name, by)
				continue
			}
			t.Errorf("%s: sets %s, which %s does not read (it reads %v)", what, name, bin.name, sorted(reads))
		}
	}
	for _, name := range bin.required {
		if env[name] == "" {
			t.Errorf("%s: %s not set", what, name)
		}
	}

	// Ports: containerPorts are exactly the ports of the listen addresses.
	listen := map[string]int32{}
	for _, v := range bin.addrs {
		listen[v] = port(t, what+" "+v, env[v])
	}
	var want, got []int32
	for _, p := range listen {
		want = append(want, p)
	}
	for _, p := range c.Ports {
		got = append(got, p.ContainerPort)
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			t.Errorf("%s: port %d protocol %s", what, p.ContainerPort, p.Protocol)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		t.Errorf("%s: containerPorts %v, but the addresses in its env listen on %v", what, got, want)
	}

	// Probes: /healthz and /readyz on the metrics port; a gRPC probe on
	// the gRPC port.
	metrics := listen["RANGECAST_METRICS_ADDR"]
	checkHTTPProbe(t, what+" liveness", c, c.LivenessProbe, "/healthz", metrics)
	checkHTTPProbe(t, what+" readiness", c, c.ReadinessProbe, "/readyz", metrics)
	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		if p == nil {
			continue
		}
		if g := p.HTTPGet; g != nil {
			if containerPort(c, g.Port) != metrics || (g.Path != "/healthz" && g.Path != "/readyz") {
				t.Errorf("%s: probe GET %s on port %v; the only endpoints are /healthz and /readyz on %d", what, g.Path, g.Port.String(), metrics)
			}
		}
		if g := p.GRPC; g != nil {
			if gp, ok := listen["RANGECAST_GRPC_ADDR"]; !ok || g.Port != gp {
				t.Errorf("%s: gRPC probe on %d, gRPC listens on %d", what, g.Port, gp)
			}
		}
		if p.TCPSocket != nil || p.Exec != nil {
			t.Errorf("%s: use the binary's HTTP or gRPC health endpoints", what)
		}
	}
	if gp, ok := listen["RANGECAST_GRPC_ADDR"]; ok {
		switch {
		case env["RANGECAST_TLS_CERT"] != "":
			// The kubelet's gRPC probe is plaintext, which a TLS listener refuses.
			if p := c.StartupProbe; p == nil || p.GRPC != nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || containerPort(c, p.HTTPGet.Port) != metrics {
				t.Errorf("%s: serves gRPC over TLS, so want an httpGet /healthz startup probe on the metrics port %d (the kubelet's gRPC probe is plaintext)", what, metrics)
			}
		case c.StartupProbe == nil || c.StartupProbe.GRPC == nil || c.StartupProbe.GRPC.Port != gp:
			t.Errorf("%s: want a native gRPC startup probe on %d", what, gp)
		}
	}

	// Security.
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Errorf("%s: no securityContext", what)
	default:
		psc := spec.SecurityContext
		nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
		seccomp := (sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault) ||
			(psc != nil && psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault)
		if !nonRoot {
			t.Errorf("%s: runAsNonRoot not set", what)
		}
		if !seccomp {
			t.Errorf("%s: seccompProfile RuntimeDefault not set", what)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: readOnlyRootFilesystem not set", what)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation not false", what)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: capabilities must drop ALL and add none", what)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: want cpu and memory requests and a memory limit", what)
	}
	if len(spec.TopologySpreadConstraints) == 0 {
		t.Errorf("%s: no topologySpreadConstraints", what)
	}
	for _, tsc := range spec.TopologySpreadConstraints {
		if !selects(tsc.LabelSelector.MatchLabels, d.Spec.Template.Labels) {
			t.Errorf("%s: topology spread selector %v does not match its pods", what, tsc.LabelSelector.MatchLabels)
		}
	}
	if !selects(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("%s: selector does not match its template", what)
	}

	switch bin.name {
	case "coordinator":
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
			t.Errorf("%s: want 2 replicas (one leads, one stands by)", what)
		}
	case "pageworker":
		// The drain: one in-flight window, each send bounded by the 30 s
		// SMTP timeout, then record and report.
		if g := spec.TerminationGracePeriodSeconds; g == nil || *g < 90 {
			t.Errorf("%s: terminationGracePeriodSeconds %v, want >= 90 for the drain of two windows of 30 s sends", what, g)
		}
	}
}

func checkHTTPProbe(t *testing.T, what string, c corev1.Container, p *corev1.Probe, path string, metrics int32) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: want httpGet %s", what, path)
		return
	}
	if p.HTTPGet.Path != path {
		t.Errorf("%s: path %s, want %s", what, p.HTTPGet.Path, path)
	}
	if got := containerPort(c, p.HTTPGet.Port); got != metrics {
		t.Errorf("%s: port %s is %d, want the metrics port %d", what, p.HTTPGet.Port.String(), got, metrics)
	}
}

// checkServices: every Service selects pods of a workload in the build, and
// every targetPort is a port of that workload's container.
func checkServices(t *testing.T, b *bundle) {
	for name, s := range b.services {
		var pods []corev1.PodTemplateSpec
		for _, d := range b.deployments {
			if selects(s.Spec.Selector, d.Spec.Template.Labels) {
				pods = append(pods, d.Spec.Template)
			}
		}
		for _, st := range b.statefulSets {
			if selects(s.Spec.Selector, st.Spec.Template.Labels) {
				pods = append(pods, st.Spec.Template)
			}
		}
		if len(pods) != 1 {
			t.Errorf("Service %s selects %d workloads, want 1", name, len(pods))
			continue
		}
		c := pods[0].Spec.Containers[0]
		for _, p := range s.Spec.Ports {
			if containerPort(c, p.TargetPort) <= 0 {
				t.Errorf("Service %s: targetPort %s is no port of container %s", name, p.TargetPort.String(), c.Name)
			}
		}
	}
	if s, ok := b.services["coordinator"]; ok {
		var ports []int32
		for _, p := range s.Spec.Ports {
			ports = append(ports, p.Port)
		}
		if !slices.Equal(ports, []int32{7070, 8080, 9090}) {
			t.Errorf("Service coordinator: ports %v, want grpc 7070, http 8080, metrics 9090", ports)
		}
	} else {
		t.Error("no Service coordinator")
	}
}

func checkPDBs(t *testing.T, b *bundle) {
	covered := map[string]bool{}
	for _, p := range b.pdbs {
		n := 0
		for name, d := range b.deployments {
			if selects(p.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
				covered[name] = true
				n++
			}
		}
		if n != 1 {
			t.Errorf("PodDisruptionBudget %s selects %d Deployments, want 1", p.Name, n)
		}
	}
	for _, name := range []string{"coordinator", "pageworker"} {
		if !covered[name] {
			t.Errorf("Deployment %s has no PodDisruptionBudget", name)
		}
	}
}

// checkAutoscaling: a ScaledObject or HPA targets the pageworker, watches
// the stream and consumer internal/bus names, and the Deployment leaves the
// replica count to it.
func checkAutoscaling(t *testing.T, b *bundle) {
	scalers := 0
	for _, so := range b.scaled {
		scalers++
		name := str(so, "metadata", "name")
		if target := str(so, "spec", "scaleTargetRef", "name"); target != "pageworker" {
			t.Errorf("ScaledObject %s: scaleTargetRef.name %q, want pageworker", name, target)
		}
		for _, k := range []string{"minReplicaCount", "maxReplicaCount"} {
			if _, ok := get(so, "spec", k).(float64); !ok {
				t.Errorf("ScaledObject %s: spec.%s missing", name, k)
			}
		}
		triggers, _ := get(so, "spec", "triggers").([]any)
		if len(triggers) != 1 {
			t.Fatalf("ScaledObject %s: want one trigger, have %d", name, len(triggers))
		}
		tr, _ := triggers[0].(map[string]any)
		if typ := str(tr, "type"); typ != "nats-jetstream" {
			t.Errorf("ScaledObject %s: trigger type %q, want nats-jetstream", name, typ)
		}
		want := map[string]string{"account": "$G", "stream": bus.PageStream, "consumer": bus.PageConsumer}
		for k, v := range want {
			if got := str(tr, "metadata", k); got != v {
				t.Errorf("ScaledObject %s: trigger %s %q, want %q", name, k, got, v)
			}
		}
		ep := str(tr, "metadata", "natsServerMonitoringEndpoint")
		if _, _, err := net.SplitHostPort(ep); err != nil || strings.Contains(ep, "://") {
			t.Errorf("ScaledObject %s: natsServerMonitoringEndpoint %q, want host:port", name, ep)
		}
		if n, err := strconv.Atoi(str(tr, "metadata", "lagThreshold")); err != nil || n <= 0 {
			t.Errorf("ScaledObject %s: lagThreshold must be a positive integer string", name)
		}
	}
	for _, h := range b.hpas {
		scalers++
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != "pageworker" {
			t.Errorf("HPA %s: targets %s %s, want Deployment pageworker", h.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
		}
		cpu := false
		for _, m := range h.Spec.Metrics {
			cpu = cpu || (m.Resource != nil && m.Resource.Name == corev1.ResourceCPU)
		}
		if !cpu {
			t.Errorf("HPA %s: no CPU metric", h.Name)
		}
	}
	if scalers > 1 {
		t.Errorf("%d autoscalers for the pageworker", scalers)
	}
	if w, ok := b.deployments["pageworker"]; ok && scalers == 1 && w.Spec.Replicas != nil {
		t.Error("Deployment pageworker sets replicas although an autoscaler owns it")
	}
	if strings.HasSuffix(b.dir, "keda") && len(b.scaled) != 1 {
		t.Error("overlays/keda: want one ScaledObject")
	}
	if strings.HasSuffix(b.dir, "hpa") && len(b.hpas) != 1 {
		t.Error("overlays/hpa: want one HorizontalPodAutoscaler")
	}
}

// checkDev: NATS with JetStream on a PVC and Postgres, both where the
// Secret and ConfigMap point.
func checkDev(t *testing.T, b *bundle) {
	nats, ok := b.deployments["nats"]
	if !ok {
		t.Fatal("overlays/dev: no Deployment nats")
	}
	c := nats.Spec.Template.Spec.Containers[0]
	if !strings.HasPrefix(c.Image, "nats:2.12") || !slices.Contains(c.Args, "-js") {
		t.Errorf("nats: image %s args %v, want nats:2.12 with -js", c.Image, c.Args)
	}
	pvc := false
	for _, v := range nats.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			_, pvc = b.pvcs[v.PersistentVolumeClaim.ClaimName]
		}
	}
	if !pvc {
		t.Error("nats: no PVC from the build mounted")
	}
	if _, ok := b.statefulSets["postgres"]; !ok {
		t.Error("overlays/dev: no StatefulSet postgres")
	}
	for _, svc := range []string{"nats", "postgres"} {
		if _, ok := b.services[svc]; !ok {
			t.Errorf("overlays/dev: no Service %s", svc)
		}
	}
	natsURL := ""
	for _, cm := range b.configMaps {
		if v, ok := cm.Data["RANGECAST_NATS_URL"]; ok {
			natsURL = v
		}
	}
	if !strings.Contains(natsURL, "//nats:4222") {
		t.Errorf("RANGECAST_NATS_URL %q does not point at the dev NATS Service", natsURL)
	}
	if db := b.secrets["rangecast"].StringData["RANGECAST_DATABASE_URL"]; !strings.Contains(db, "@postgres:5432/") {
		t.Errorf("RANGECAST_DATABASE_URL %q does not point at the dev Postgres Service", db)
	}
	checkDevTokens(t, b)
	checkDevReachable(t, b)
}

// devToken is the dev overlay's fixed API token, which README.md prints.
const devToken = "dev-only-token-rangecast-not-secret"

// checkDevTokens: the tokens Secret the coordinator mounts is in the dev
// build, holds the key RANGECAST_TOKENS_FILE names, and that key holds the
// token the README tells the operator to export.
func checkDevTokens(t *testing.T, b *bundle) {
	secret, key := tokensMount(t, b)
	if secret == "" {
		return
	}
	s, ok := b.secrets[secret]
	if !ok {
		t.Fatalf("overlays/dev: the coordinator mounts Secret %s for its tokens, but the build has no such Secret (every API call would be refused)", secret)
	}
	raw, ok := s.StringData[key]
	if !ok {
		raw, ok = string(s.Data[key]), s.Data[key] != nil
	}
	if !ok {
		t.Fatalf("overlays/dev: Secret %s has no key %q, the file RANGECAST_TOKENS_FILE names", secret, key)
	}
	var tokens []string
	for _, line := range strings.Split(raw, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			tokens = append(tokens, line)
		}
	}
	if !slices.Equal(tokens, []string{devToken}) {
		t.Errorf("overlays/dev: Secret %s key %s holds tokens %q, want [%s]", secret, key, tokens, devToken)
	}
	readme := readFile(t, "../../README.md")
	if !strings.Contains(readme, "RANGECAST_TOKEN="+devToken) {
		t.Errorf("README.md does not show the dev token (export RANGECAST_TOKEN=%s)", devToken)
	}
}

// tokensMount resolves RANGECAST_TOKENS_FILE in the coordinator's container
// to the Secret and key (file name) it reads.
func tokensMount(t *testing.T, b *bundle) (secret, key string) {
	t.Helper()
	d, ok := b.deployments["coordinator"]
	if !ok {
		return "", ""
	}
	file := b.effectiveEnv(t, "Deployment coordinator", d.Spec.Template.Spec.Containers[0])["RANGECAST_TOKENS_FILE"]
	if file == "" {
		t.Error("Deployment coordinator: RANGECAST_TOKENS_FILE not set; the API would be unauthenticated")
		return "", ""
	}
	secret, key, _ = secretFile(t, d, file)
	return secret, key
}

// secretFile resolves a file path in d's container to the Secret volume
// mounted at its directory and the key (file name) in it. A Secret mounted
// as a directory (no subPath, no items) is seen live when it changes.
func secretFile(t *testing.T, d *appsv1.Deployment, file string) (secret, key string, v *corev1.SecretVolumeSource) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	what := "Deployment " + d.Name
	dir, key := filepath.Dir(file), filepath.Base(file)
	for _, m := range c.VolumeMounts {
		if filepath.Clean(m.MountPath) != dir {
			continue
		}
		if m.SubPath != "" {
			t.Errorf("%s: volume %s mounted with subPath; a rotation would not be seen", what, m.Name)
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				if len(v.Secret.Items) > 0 {
					t.Errorf("%s: volume %s selects items; mount the Secret whole", what, v.Name)
				}
				return v.Secret.SecretName, key, v.Secret
			}
		}
	}
	t.Errorf("%s: %s is in no Secret volume mounted at %s", what, file, dir)
	return "", "", nil
}

// checkDevReachable: the locally built :latest images are not pulled from a
// registry (Kubernetes' default for :latest is Always), and the unsubscribe
// links workers put in mail point at the coordinators' public HTTP through
// the port-forward the README and the overlay show.
func checkDevReachable(t *testing.T, b *bundle) {
	for _, name := range []string{"coordinator", "pageworker"} {
		d, ok := b.deployments[name]
		if !ok {
			continue
		}
		if c := d.Spec.Template.Spec.Containers[0]; c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("overlays/dev: Deployment %s: imagePullPolicy %q for %s, want IfNotPresent (images built locally)", name, c.ImagePullPolicy, c.Image)
		}
	}
	w, ok := b.deployments["pageworker"]
	if !ok {
		return
	}
	public := b.effectiveEnv(t, "Deployment pageworker", w.Spec.Template.Spec.Containers[0])["RANGECAST_PUBLIC_URL"]
	u, err := url.Parse(public)
	if err != nil || u.Hostname() != "localhost" || u.Path != "" {
		t.Fatalf("overlays/dev: RANGECAST_PUBLIC_URL %q, want http://localhost:PORT (the port-forward to the coordinator)", public)
	}
	httpPort := int32(0)
	for _, p := range b.services["coordinator"].Spec.Ports {
		if p.Name == "http" {
			httpPort = p.Port
		}
	}
	if u.Scheme != "http" || u.Port() != strconv.Itoa(int(httpPort)) {
		t.Errorf("overlays/dev: RANGECAST_PUBLIC_URL %q, want http://localhost:%d (Service coordinator port http)", public, httpPort)
	}
	forward := fmt.Sprintf("port-forward svc/coordinator 7070 %d", httpPort)
	for _, f := range []string{"../../README.md", "overlays/dev/kustomization.yaml", "../../docs/operations.md"} {
		if !strings.Contains(readFile(t, f), forward) {
			t.Errorf("%s does not show %q, which the dev unsubscribe links need", f, forward)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func get(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

func str(m map[string]any, path ...string) string {
	s, _ := get(m, path...).(string)
	return s
}

func sorted(m map[string]bool) []string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// TestDockerfile: one target per binary, static builds, distroless nonroot.
func TestDockerfile(t *testing.T) {
	raw, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(raw)
	if !strings.Contains(df, "CGO_ENABLED=0") {
		t.Error("Dockerfile: builds must be static (CGO_ENABLED=0)")
	}
	for _, bin := range []string{"coordinator", "pageworker", "rangecast"} {
		if !regexp.MustCompile(`(?m)^FROM gcr\.io/distroless/static:nonroot AS ` + bin + `$`).MatchString(df) {
			t.Errorf("Dockerfile: no distroless/static:nonroot target %s", bin)
		}
		if !strings.Contains(df, "./cmd/"+bin) {
			t.Errorf("Dockerfile: ./cmd/%s not built", bin)
		}
		if _, err := os.Stat("../../cmd/" + bin); err != nil {
			t.Errorf("cmd/%s: %v", bin, err)
		}
	}
}

// monitoringLabel is the namespace label networkpolicy.yaml admits metrics
// scrapers by; docs/operations.md tells operators to set it.
const monitoringLabel = "rangecast.io/monitoring"

// ingressAllows reports whether ingress to port of pods labelled podLabels
// is allowed by some policy, and from where: "anywhere", or the
// namespace-selector labels of the rules that admit it.
func ingressAllows(b *bundle, podLabels map[string]string, port int32) (anywhere bool, from []map[string]string) {
	for _, np := range b.netpols {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(podLabels)) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			continue
		}
		for _, rule := range np.Spec.Ingress {
			portOK := len(rule.Ports) == 0
			for _, p := range rule.Ports {
				portOK = portOK || (p.Port != nil && p.Port.Type == intstr.Int && p.Port.IntVal == port)
			}
			if !portOK {
				continue
			}
			if len(rule.From) == 0 {
				anywhere = true
			}
			for _, peer := range rule.From {
				if peer.NamespaceSelector != nil {
					from = append(from, peer.NamespaceSelector.MatchLabels)
				}
			}
		}
	}
	return anywhere, from
}

// checkNetworkPolicies: ingress is denied by default; the coordinator's API
// and HTTP ports are open to all, metrics only to the monitoring namespace,
// and nothing else of rangecast's is open.
func checkNetworkPolicies(t *testing.T, b *bundle) {
	deny := false
	for _, np := range b.netpols {
		if len(np.Spec.PodSelector.MatchLabels) == 0 && len(np.Spec.PodSelector.MatchExpressions) == 0 &&
			slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) && len(np.Spec.Ingress) == 0 {
			deny = true
		}
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port == nil || p.Port.Type != intstr.Int {
					t.Errorf("NetworkPolicy %s: give ports as numbers (named ports are per pod)", np.Name)
				}
			}
		}
	}
	if !deny {
		t.Error("no default-deny ingress NetworkPolicy (podSelector {}, policyTypes [Ingress], no rules)")
	}
	want := map[string]map[int32]string{
		"coordinator": {7070: "anywhere", 8080: "anywhere", 9090: "monitoring"},
		"pageworker":  {9091: "monitoring"},
	}
	for name, ports := range want {
		d, ok := b.deployments[name]
		if !ok {
			continue
		}
		podLabels := d.Spec.Template.Labels
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, cp := range c.Ports {
				if _, ok := ports[cp.ContainerPort]; !ok {
					t.Errorf("Deployment %s: containerPort %d has no NetworkPolicy expectation in this test", name, cp.ContainerPort)
				}
			}
		}
		for port, who := range ports {
			anywhere, from := ingressAllows(b, podLabels, port)
			switch who {
			case "anywhere":
				if !anywhere {
					t.Errorf("NetworkPolicy: %s port %d not open to all", name, port)
				}
			case "monitoring":
				if anywhere {
					t.Errorf("NetworkPolicy: %s metrics port %d open to all, want the monitoring namespace only", name, port)
				}
				ok := len(from) > 0
				for _, l := range from {
					ok = ok && l[monitoringLabel] == "true"
				}
				if !ok {
					t.Errorf("NetworkPolicy: %s metrics port %d admitted from %v, want namespaces labelled %s=true only", name, port, from, monitoringLabel)
				}
			}
		}
		// A port no one expects stays closed.
		if anywhere, from := ingressAllows(b, podLabels, 12345); anywhere || len(from) > 0 {
			t.Errorf("NetworkPolicy: %s open on an arbitrary port", name)
		}
	}
}

// checkProduction: keda's autoscaling, a CloudNativePG Cluster the Secret
// points at (its -rw Service, the database initdb creates), page workers
// bigger than the base's, and NATS Helm values with JetStream clustered on
// files, fsync always and monitoring exposed for KEDA.
func checkProduction(t *testing.T, b *bundle) {
	if len(b.scaled) != 1 {
		t.Error("overlays/production: want one ScaledObject (it builds on overlays/keda)")
	}
	if len(b.clusters) != 1 {
		t.Fatalf("overlays/production: %d CloudNativePG Clusters, want 1", len(b.clusters))
	}
	cl := b.clusters[0]
	name := str(cl, "metadata", "name")
	if n, _ := get(cl, "spec", "instances").(float64); n < 3 {
		t.Errorf("Cluster %s: spec.instances %v, want >= 3", name, get(cl, "spec", "instances"))
	}
	if str(cl, "spec", "storage", "size") == "" {
		t.Errorf("Cluster %s: spec.storage.size not set", name)
	}
	db, owner := str(cl, "spec", "bootstrap", "initdb", "database"), str(cl, "spec", "bootstrap", "initdb", "owner")
	if db == "" || owner == "" {
		t.Errorf("Cluster %s: spec.bootstrap.initdb.database and .owner must be set", name)
	}
	raw := b.secrets["rangecast"].StringData["RANGECAST_DATABASE_URL"]
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("RANGECAST_DATABASE_URL: %v", err)
	}
	if h := u.Hostname(); h != name+"-rw" && !strings.HasPrefix(h, name+"-rw.") {
		t.Errorf("RANGECAST_DATABASE_URL host %q, want the Cluster's read-write Service %s-rw", h, name)
	}
	if u.Port() != "5432" || strings.TrimPrefix(u.Path, "/") != db || u.User.Username() != owner {
		t.Errorf("RANGECAST_DATABASE_URL %q: want port 5432, database %q, user %q", raw, db, owner)
	}

	base := build(t, "base")
	bigger := func(what string, prod, base resource.Quantity) {
		if prod.Cmp(base) <= 0 {
			t.Errorf("Deployment pageworker: %s %s, want more than the base's %s", what, prod.String(), base.String())
		}
	}
	pr := b.deployments["pageworker"].Spec.Template.Spec.Containers[0].Resources
	br := base.deployments["pageworker"].Spec.Template.Spec.Containers[0].Resources
	bigger("cpu request", *pr.Requests.Cpu(), *br.Requests.Cpu())
	bigger("memory request", *pr.Requests.Memory(), *br.Requests.Memory())
	bigger("memory limit", *pr.Limits.Memory(), *br.Limits.Memory())

	// NATS Helm values: not part of the kustomize build, checked here.
	raw2, err := os.ReadFile("overlays/production/nats-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.UnmarshalStrict(raw2, &vals); err != nil {
		t.Fatalf("nats-values.yaml: %v", err)
	}
	checks := []struct {
		path []string
		want any
	}{
		{[]string{"config", "cluster", "enabled"}, true},
		{[]string{"config", "cluster", "replicas"}, float64(3)},
		{[]string{"config", "jetstream", "enabled"}, true},
		{[]string{"config", "jetstream", "fileStore", "enabled"}, true},
		{[]string{"config", "jetstream", "fileStore", "pvc", "enabled"}, true},
		{[]string{"config", "jetstream", "merge", "sync_interval"}, "always"},
		{[]string{"config", "monitor", "enabled"}, true},
		{[]string{"config", "monitor", "port"}, float64(8222)},
		{[]string{"service", "ports", "monitor", "enabled"}, true},
	}
	for _, c := range checks {
		if got := get(vals, c.path...); got != c.want {
			t.Errorf("nats-values.yaml: %s = %v, want %v", strings.Join(c.path, "."), got, c.want)
		}
	}
	if str(vals, "config", "jetstream", "fileStore", "pvc", "size") == "" {
		t.Error("nats-values.yaml: config.jetstream.fileStore.pvc.size not set")
	}
	kust, err := os.ReadFile("overlays/production/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(kust, &k); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(k.Resources, "nats-values.yaml") {
		t.Error("overlays/production: nats-values.yaml is Helm values, not a kustomize resource")
	}
	// The ScaledObject reads the monitoring port of the Helm release "nats"
	// in this namespace (service.ports.monitor above).
	if len(b.scaled) == 1 {
		triggers, _ := get(b.scaled[0], "spec", "triggers").([]any)
		if len(triggers) == 1 {
			tr, _ := triggers[0].(map[string]any)
			if ep := str(tr, "metadata", "natsServerMonitoringEndpoint"); ep != "nats."+namespace+".svc.cluster.local:8222" {
				t.Errorf("ScaledObject: natsServerMonitoringEndpoint %q is not the Helm release nats's monitoring port", ep)
			}
		}
	}
}
