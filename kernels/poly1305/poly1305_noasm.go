package poly1305

func registerArch() {}
