// Package guest runs Go tests inside a Linux guest booted under QEMU (TCG),
// so that tests can use a real kernel's block layer and NVMe driver: NVMe
// namespaces with metadata and protection information, passthrough ioctls,
// the kernel's NBD client. It is for tests only.
//
// A test calls Run with the guest's configuration (its NVMe namespaces,
// environment and timeout). On the host, Run builds the test's own package
// as a static test binary, boots a guest whose /init runs that binary with
// -test.run set to the calling test, relays its output, fails the test if the
// guest's run failed, and returns false. Inside the guest (DIFCTL_GUEST=1, set
// by /init), Run returns true and the test body runs against the guest's
// devices:
//
//	func TestX(t *testing.T) {
//		if !guest.Run(t, guest.Config{Namespaces: []guest.Namespace{ns}}) {
//			return
//		}
//		// in the guest: /dev/nvme0n1 is ns
//	}
//
// Boot does the host's part alone, for a test whose guest side is another
// test function, and tests that edit a namespace's image between boots.
//
// The guest's kernel and busybox come from Debian's packages
// (linux-image-amd64's versioned dependency and busybox-static), fetched with
// apt-get download and unpacked with dpkg -x into a cache directory keyed by
// package version ($XDG_CACHE_HOME/difctl-guest, or ~/.cache/difctl-guest),
// reused across runs. The initramfs (cpio newc, gzip; written with u-root's
// pkg/cpio) holds busybox, the kernel modules asked for with their
// dependencies (read from each module's .modinfo: the package has no
// modules.dep), the test binary and /init. Results come back on the serial
// console between two marker lines; the guest powers off when the test binary
// exits, and a guest that does not is killed at the timeout.
//
// Guests boot only when DIFCTL_GUEST_TESTS=1 (EnableEnv); otherwise Run and
// Boot skip the test. Where QEMU, apt or the kernel package cannot be had,
// they skip it too, except on CI (CI=true), where they fail it. The rig is
// for Linux hosts; elsewhere the package is empty.
package guest
