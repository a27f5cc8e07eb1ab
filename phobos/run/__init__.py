# Running kernels: on the GPU through PyCUDA, or on the CPU.
#
#   runtime.py      PyCUDA: load PTX, bind arguments, launch, time, copy
#   cuda.py         the driver calls of the launch path, through ctypes on libcuda
#   interpreter.py  the checked kernel run on NumPy with the language's meaning
#   emulator/       the generated PTX executed on the CPU, with bounds and race checks
#   backends.py     one interface over the three (run, time, scratch copies)
#   tensor_map.py   TMA tensor maps, encoded by the driver or for the emulator
#
# What enters is a compiled or checked kernel and bound arguments; what leaves
# is the tensors written.
