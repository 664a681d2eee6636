package main

import (
	"fmt"
	"net/url"
	"os"
	"os/signal"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

func main() {
	cfg := embed.NewConfig()
	cfg.Dir = os.Args[1]
	c, _ := url.Parse("http://127.0.0.1:23791")
	p, _ := url.Parse("http://127.0.0.1:23801")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*c}, []url.URL{*c}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*p}, []url.URL{*p}
	cfg.InitialCluster = "default=" + p.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		panic(err)
	}
	<-e.Server.ReadyNotify()
	fmt.Println("ready")
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt)
	<-ch
	e.Close()
}
