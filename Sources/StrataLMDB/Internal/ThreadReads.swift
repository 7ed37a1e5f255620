#if canImport(Glibc)
import Glibc
#endif

/// The read transactions (``Environment/read(_:)`` and ``ReadSnapshot/read(_:)`` bodies)
/// the current thread is inside, per environment.
///
/// A map resize or a close must wait until no read transaction of this process is
/// open; a thread that holds one and then asks to grow the map or to close would wait
/// for itself. This per-thread list lets the environment refuse that case at once
/// instead of timing out.
enum ThreadReads {
    private final class Box {
        var environments: [ObjectIdentifier] = []
    }

    // Swift initialises a static exactly once, atomically, so the key is created once.
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { pointer in
            guard let pointer else { return }
            Unmanaged<AnyObject>.fromOpaque(pointer).release()
        }
        return key
    }()

    private static var box: Box {
        if let pointer = pthread_getspecific(key) {
            return Unmanaged<Box>.fromOpaque(pointer).takeUnretainedValue()
        }
        let box = Box()
        pthread_setspecific(key, Unmanaged.passRetained(box).toOpaque())
        return box
    }

    static func enter(_ environment: ObjectIdentifier) {
        box.environments.append(environment)
    }

    static func leave(_ environment: ObjectIdentifier) {
        let box = box
        if let index = box.environments.lastIndex(of: environment) {
            box.environments.remove(at: index)
        }
    }

    static func holds(_ environment: ObjectIdentifier) -> Bool {
        box.environments.contains(environment)
    }
}
