// libFuzzer target for the record decoder (`make fuzz`).
//
// Every input must decode to a record or a typed error: never a trap, never an over-read
// (AddressSanitizer watches). What decodes must survive encode -> decode unchanged.
// Built normally (swift build) it replays the files named on its command line instead.
import Foundation
@_spi(StorageInternals) import Strata

@_cdecl("LLVMFuzzerTestOneInput")
public func recordDecoderFuzzOne(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    checkOneInput(UnsafeRawBufferPointer(start: data, count: size))
    return 0
}

func checkOneInput(_ bytes: UnsafeRawBufferPointer) {
    guard let record = try? RecordCodec.decode(bytes) else { return }
    let encoded = RecordCodec.encode(record)
    guard let again = try? RecordCodec.decode(encoded), again.version == record.version,
          again.fields.keys.sorted() == record.fields.keys.sorted(), RecordCodec.encode(again) == encoded
    else {
        fatalError("a decoded record does not survive encode -> decode: \(Array(bytes))")
    }
}

#if !STRATA_FUZZING
/// Replays corpus files: `RecordDecoderFuzzer FILE...`.
@main
enum ReplayRecordInputs {
    static func main() throws {
        for path in CommandLine.arguments.dropFirst() {
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            data.withUnsafeBytes { checkOneInput($0) }
        }
    }
}
#endif
