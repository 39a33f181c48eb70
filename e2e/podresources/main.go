// Command podresources-server serves the kubelet's PodResources gRPC API v1
// (service v1.PodResourcesLister: List, GetAllocatableResources, Get) on a unix socket, from a
// JSON state file, for the hwprobe tests. It registers the server through the generated code of
// k8s.io/kubelet/pkg/apis/podresources/v1 (the version pinned in go.mod, the one kubernetes
// v1.37.2 builds with), so the wire format, the service and method names are the kubelet's own.
//
// The state file is read again on every call, so a test can change what the "kubelet" answers
// without restarting it. Its shape, with the message fields in protojson form:
//
//	{"list": <ListPodResourcesResponse>, "allocatable": <AllocatableResourcesResponse>,
//	 "error": "text"}
//
// With "error" set, every call fails with gRPC status Unavailable and that text.
// On start it prints "listening on <socket>" on stdout once the socket accepts connections.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"
)

type state struct {
	List        json.RawMessage `json:"list"`
	Allocatable json.RawMessage `json:"allocatable"`
	Error       string          `json:"error"`
}

type server struct {
	podresources.UnimplementedPodResourcesListerServer
	path string
}

func (s *server) load() (*state, error) {
	raw, err := os.ReadFile(s.path)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "state file: %v", err)
	}
	var st state
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, status.Errorf(codes.Internal, "state file %s: %v", s.path, err)
	}
	if st.Error != "" {
		return nil, status.Error(codes.Unavailable, st.Error)
	}
	return &st, nil
}

func (s *server) List(ctx context.Context, _ *podresources.ListPodResourcesRequest) (*podresources.ListPodResourcesResponse, error) {
	st, err := s.load()
	if err != nil {
		return nil, err
	}
	out := &podresources.ListPodResourcesResponse{}
	if len(st.List) > 0 {
		if err := protojson.Unmarshal(st.List, out); err != nil {
			return nil, status.Errorf(codes.Internal, "state file list: %v", err)
		}
	}
	return out, nil
}

func (s *server) GetAllocatableResources(ctx context.Context, _ *podresources.AllocatableResourcesRequest) (*podresources.AllocatableResourcesResponse, error) {
	st, err := s.load()
	if err != nil {
		return nil, err
	}
	out := &podresources.AllocatableResourcesResponse{}
	if len(st.Allocatable) > 0 {
		if err := protojson.Unmarshal(st.Allocatable, out); err != nil {
			return nil, status.Errorf(codes.Internal, "state file allocatable: %v", err)
		}
	}
	return out, nil
}

func (s *server) Get(ctx context.Context, req *podresources.GetPodResourcesRequest) (*podresources.GetPodResourcesResponse, error) {
	list, err := s.List(ctx, nil)
	if err != nil {
		return nil, err
	}
	for _, pod := range list.GetPodResources() {
		if pod.GetName() == req.GetPodName() && pod.GetNamespace() == req.GetPodNamespace() {
			return &podresources.GetPodResourcesResponse{PodResources: pod}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "pod %s/%s not found", req.GetPodNamespace(), req.GetPodName())
}

func main() {
	socket := flag.String("socket", "", "unix socket to serve on (removed first if it exists)")
	statePath := flag.String("state", "", "JSON state file, read on every call")
	flag.Parse()
	if *socket == "" || *statePath == "" {
		fmt.Fprintln(os.Stderr, "podresources-server: need -socket and -state")
		os.Exit(2)
	}
	_ = os.Remove(*socket)
	lis, err := net.Listen("unix", *socket)
	if err != nil {
		fmt.Fprintf(os.Stderr, "podresources-server: %v\n", err)
		os.Exit(1)
	}
	srv := grpc.NewServer()
	podresources.RegisterPodResourcesListerServer(srv, &server{path: *statePath})
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		srv.Stop()
	}()
	fmt.Printf("listening on %s\n", *socket)
	if err := srv.Serve(lis); err != nil {
		fmt.Fprintf(os.Stderr, "podresources-server: %v\n", err)
		os.Exit(1)
	}
}
